"""What `magnetar-admin` prints, as pulsar-admin prints it.

pulsar-admin prints a list one item per line (a string as it is, anything else as JSON), a plain string as
it is, and any other value as JSON through Jackson's default pretty printer: two-space indents for object
members at each object level, ``"key" : value``, arrays on one line (``[ "a", "b" ]``, a nested object opening on the same line),
``{ }`` and ``[ ]`` when empty. Scripts that read its output read ours the same way, and every JSON
document it prints parses as JSON. (pulsar-admin prints a map, such as permissions, as ``key    value``
lines in Java's toString; Magnetar prints that map as JSON instead, which a script can parse.)
"""

from __future__ import annotations

import json

import click


def jackson_pretty(value, depth: int = 0) -> str:
    """``value`` as Jackson's DefaultPrettyPrinter writes it (non-ASCII characters unescaped)."""
    if isinstance(value, dict):
        if not value:
            return "{ }"
        pad = "  " * (depth + 1)
        members = [f"{pad}{json.dumps(str(k), ensure_ascii=False)} : {jackson_pretty(v, depth + 1)}"
                   for k, v in value.items()]
        return "{\n" + ",\n".join(members) + "\n" + "  " * depth + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(jackson_pretty(v, depth) for v in value) + " ]"  # inline arrays add no indent level
    return json.dumps(value, ensure_ascii=False)


def render(value) -> str:
    """The text pulsar-admin prints for a result (a policy that is not set prints ``null``, as there)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n".join(item if isinstance(item, str) else jackson_pretty(item) for item in value)
    return jackson_pretty(value)


def emit(value) -> None:
    """Print a result as pulsar-admin prints it. (A command that answers nothing, such as a create, prints
    nothing and does not call this.)"""
    text = render(value)
    if text:  # an empty list prints no line
        click.echo(text)
