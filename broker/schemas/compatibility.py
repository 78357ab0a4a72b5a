"""Schema compatibility: Pulsar's strategies over Avro's schema-resolution rules, as pure functions.

How it works. A strategy says which direction of reading must work between
a new schema and the topic's history:

- BACKWARD: the new schema can read data written with the latest one
  (consumers upgrade first); FORWARD: the latest can read data written with the
  new one (producers upgrade first); FULL: both.
- The *_TRANSITIVE forms check against every live version instead of the latest.
- ALWAYS_COMPATIBLE accepts anything (even a change of type);
  ALWAYS_INCOMPATIBLE refuses every new schema (a schema already in the
  history is not "new": the registry finds it before asking here).

"Can read" is Avro's resolution (reader schema vs writer schema): a reader
field missing from the writer needs a default (or an alias naming a writer
field); writer fields the reader lacks are skipped; int -> long/float/double,
long -> float/double, float -> double and string <-> bytes are promotions;
a writer union is readable when every branch is, a reader union when some
branch reads the writer; every writer enum symbol must be a reader symbol
unless the reader enum has a default; fixed sizes must match; names of nested
named types must match (or the reader's aliases name the writer), while the
top-level record name is free, as in Avro's own checker. JSON
schemas carry an Avro-style definition and are checked the same way. Other
types (STRING, INT64, BYTES, KEY_VALUE...) are compared by type alone
(KEY_VALUE also by its key and value types).
"""

from __future__ import annotations

import enum
import json

import fastavro
from fastavro.schema import SchemaParseException

from broker.errors import IncompatibleSchemaError
from broker.schemas import AVRO_BASED, InvalidSchemaError, SchemaInfo


class Strategy(enum.Enum):
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.name.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.name.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.name.startswith(("FORWARD", "FULL"))


DEFAULT_STRATEGY = Strategy.BACKWARD
# Pulsar's older auto-update names (schema_auto_update_compatibility_strategy) map onto the strategies.
_ALIASES = {"UNDEFINED": None, "AUTOUPDATEDISABLED": Strategy.ALWAYS_INCOMPATIBLE,
            "BACKWARDTRANSITIVE": Strategy.BACKWARD_TRANSITIVE, "FORWARDTRANSITIVE": Strategy.FORWARD_TRANSITIVE,
            "FULLTRANSITIVE": Strategy.FULL_TRANSITIVE, "ALWAYSCOMPATIBLE": Strategy.ALWAYS_COMPATIBLE}


def parse_strategy(text) -> Strategy | None:
    """A strategy from its name (case-insensitive); None for UNDEFINED (the broker's default applies).
    InvalidSchemaError names the choices for anything else."""
    if isinstance(text, str):
        key = text.strip().upper()
        if key in Strategy.__members__:
            return Strategy[key]
        if key.replace("_", "") in _ALIASES:
            return _ALIASES[key.replace("_", "")]
    raise InvalidSchemaError(f"unknown schema compatibility strategy {text!r}; one of "
                             f"{[s.value for s in Strategy] + ['UNDEFINED']}")


def check_compatible(strategy: Strategy, history: list[SchemaInfo], new: SchemaInfo) -> None:
    """Raise IncompatibleSchemaError (with the reasons) unless ``new`` may follow ``history`` (live versions,
    oldest first) under ``strategy``."""
    if not history or strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    if strategy is Strategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError("the topic's schema compatibility strategy is ALWAYS_INCOMPATIBLE: "
                                      "no new schema may be registered")
    against = history if strategy.transitive else history[-1:]
    for existing in reversed(against):
        problems = problems_between(strategy, existing, new)
        if problems:
            raise IncompatibleSchemaError(f"{new.type} schema is incompatible with the topic's schema under "
                                          f"{strategy.value}: " + "; ".join(problems[:5]))


def problems_between(strategy: Strategy, existing: SchemaInfo, new: SchemaInfo) -> list[str]:
    """Why ``new`` may not follow ``existing`` under a BACKWARD/FORWARD/FULL strategy (empty: it may)."""
    if existing.type != new.type:
        return [f"the schema type changes from {existing.type} to {new.type}"]
    if new.type == "KEY_VALUE":
        return [f"the key/value {part} type changes from {existing.properties.get(part)} to {new.properties.get(part)}"
                for part in ("key.schema.type", "value.schema.type")
                if existing.properties.get(part) != new.properties.get(part)]
    if new.type not in AVRO_BASED:
        return []
    old_def, new_def = parse_avro(existing.data), parse_avro(new.data)
    problems = []
    if strategy.backward:
        problems += [f"the new schema cannot read data written with the existing one: {p}"
                     for p in can_read(new_def, old_def)]
    if strategy.forward:
        problems += [f"the existing schema cannot read data written with the new one: {p}"
                     for p in can_read(old_def, new_def)]
    return problems


def parse_avro(data: bytes):
    """An Avro-style definition, parsed and checked by fastavro (full names; later uses of a named type are
    its full name). InvalidSchemaError if it is not valid JSON or not a valid Avro schema."""
    try:
        return fastavro.parse_schema(json.loads(data), _write_hint=False)
    except (SchemaParseException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidSchemaError(f"schema definition is not a valid Avro schema: {exc}"[:500]) from exc


# ---- Avro resolution -------------------------------------------------------------------------------------

_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_COMPLEX = {"record", "error", "enum", "fixed", "array", "map"}


def can_read(reader, writer) -> list[str]:
    """Problems a reader schema has reading data written with a writer schema (both as ``parse_avro`` returns
    them); empty when it can."""
    return _Resolver(_names(reader), _names(writer)).check(reader, writer, "", top=True)


def _names(schema) -> dict[str, dict]:
    """Named types (record, enum, fixed) by full name, so references can be followed."""
    out: dict[str, dict] = {}

    def walk(s):
        if isinstance(s, list):
            for branch in s:
                walk(branch)
        elif isinstance(s, dict):
            if s.get("type") in ("record", "error", "enum", "fixed") and "name" in s:
                if s["name"] in out:
                    return
                out[s["name"]] = s
            for f in s.get("fields", ()):
                walk(f["type"])
            for key in ("items", "values"):
                if key in s:
                    walk(s[key])
            if isinstance(s.get("type"), (dict, list)):
                walk(s["type"])

    walk(schema)
    return out


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class _Resolver:
    def __init__(self, reader_names: dict, writer_names: dict):
        self.reader_names, self.writer_names = reader_names, writer_names
        self.in_progress: set[tuple[str, str]] = set()  # recursive named types: assume compatible while checking

    def _resolve(self, schema, names):
        """A schema as a union (list) or a dict whose "type" is a primitive or complex type name: references are
        followed and logical types read as their underlying type."""
        while True:
            if isinstance(schema, list):
                return schema
            if isinstance(schema, str):
                if schema in _PRIMITIVES or schema not in names:  # fastavro refused unknown names already
                    return {"type": schema}
                schema = names[schema]
                continue
            kind = schema.get("type")
            if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in _PRIMITIVES | _COMPLEX):
                schema = kind
                continue
            return schema

    def check(self, reader, writer, where: str, top: bool = False) -> list[str]:
        r, w = self._resolve(reader, self.reader_names), self._resolve(writer, self.writer_names)
        if isinstance(w, list):  # every writer branch must be readable
            out = []
            for branch in w:
                out += self.check(r, branch, where)
            return out
        if isinstance(r, list):
            for branch in r:
                if not self.check(branch, w, where):
                    return []
            return [f"{where or 'value'}: no branch of the reader's union reads the writer's {_kind(w)}"]
        rt, wt = r["type"], w["type"]
        if rt == "error":
            rt = "record"
        if wt == "error":
            wt = "record"
        if rt != wt:
            if wt in _PROMOTIONS and rt in _PROMOTIONS[wt]:
                return []
            return [f"{where or 'value'}: the writer's {wt} cannot be read as {rt}"]
        if rt in _PRIMITIVES:
            return []
        if rt in ("record", "enum", "fixed") and not top and not _names_match(r, w):
            return [f"{where or 'value'}: named type {r['name']} does not match the writer's {w['name']}"]
        if rt == "array":
            return self.check(r["items"], w["items"], f"{where}[]")
        if rt == "map":
            return self.check(r["values"], w["values"], f"{where}{{}}")
        if rt == "fixed":
            return [] if r["size"] == w["size"] else [f"{where}: fixed size {w['size']} cannot be read as {r['size']}"]
        if rt == "enum":
            if "default" in r:
                return []
            missing = [s for s in w["symbols"] if s not in r["symbols"]]
            return [f"{where or 'value'}: the reader's enum lacks symbol(s) {missing} and has no default"] if missing else []
        return self._record(r, w, where)

    def _record(self, r: dict, w: dict, where: str) -> list[str]:
        key = (r["name"], w["name"])
        if key in self.in_progress:
            return []
        self.in_progress.add(key)
        try:
            writer_fields = {f["name"]: f for f in w["fields"]}
            out = []
            for field in r["fields"]:
                path = f"{where}.{field['name']}" if where else field["name"]
                match = writer_fields.get(field["name"]) or next(
                    (writer_fields[a] for a in field.get("aliases", ()) if a in writer_fields), None)
                if match is None:
                    if "default" not in field:
                        out.append(f"field {path} is missing from the writer's schema and has no default")
                    continue
                out += self.check(field["type"], match["type"], path)
            return out
        finally:
            self.in_progress.discard(key)


def _names_match(r: dict, w: dict) -> bool:
    if _short(r["name"]) == _short(w["name"]):
        return True
    return any(_short(a) == _short(w["name"]) for a in r.get("aliases", ()))


def _kind(schema) -> str:
    return schema["type"] if isinstance(schema, dict) else "union"
