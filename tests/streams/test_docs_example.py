"""The replicated write-ahead log example of docs/streams.md runs as written against a real broker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from magnetar.streams import WriterFenced

DOC = Path(__file__).resolve().parents[2] / "docs" / "streams.md"


def _example_blocks() -> list[str]:
    section = DOC.read_text().split("## Example", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_key_value_example_is_at_most_30_lines_and_runs(standalone):
    model, usage = _example_blocks()
    assert len(model.strip().splitlines()) <= 30
    scope: dict = {}
    exec(compile(model, "docs/streams.md (model)", "exec"), scope)
    exec(compile(usage.replace("127.0.0.1:4181", standalone.stream_address), "docs/streams.md (usage)", "exec"), scope)
    a, b = scope["a"], scope["b"]
    assert b.state == {"x": 1, "y": 2}
    with pytest.raises(WriterFenced):  # the deposed leader cannot append
        a.submit("set", "z", 3)
    a.catch_up()
    assert a.state == b.state
    for replica in (a, b, scope["admin"]):
        replica.client.close() if hasattr(replica, "client") else replica.close()
