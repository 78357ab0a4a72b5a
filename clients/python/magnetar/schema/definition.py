"""Typed records shaped like ``pulsar.schema``'s: declare a ``Record`` subclass with field objects, get its Avro schema.

A field is optional unless ``required=True``: an optional field's Avro type is
the union ``["null", T]`` and its value may be None. ``default=`` sets the value a
new record starts with; ``required_default=True`` also writes that default into
the Avro schema (which is what lets a reader add the field under BACKWARD
compatibility). ``_sorted_fields = True`` on a record orders its schema's fields
by name; ``_avro_namespace`` sets the schema's namespace. A nested record is
declared with an instance (``inner = Inner()``) or the class; an ``enum.Enum``
class becomes a ``CustomEnum`` field.

Values convert to and from plain data (``to_data`` / ``from_data``): what
fastavro writes and reads and what JSON carries (enums by symbol name, nested
records as objects, bytes as text in JSON).
"""

from __future__ import annotations

import copy
import enum

_RESERVED = ("_default", "_required", "_required_default")


def _name_of(x) -> str:
    return getattr(x, "__name__", str(x))


class Field:
    """One typed field of a record. Subclasses name their Avro type and the Python types they accept."""

    avro_type = "null"
    python_types: tuple = ()
    empty = None  # the value of an unset optional field

    def __init__(self, default=None, required: bool = False, required_default: bool = False):
        self._required = required
        self._required_default = required_default
        self._default = None if default is None else self.validate_type("default", default)

    def type(self) -> str:
        return self.avro_type

    def python_type(self):
        return self.python_types

    def default(self):
        return self.empty if self._default is None else self._default

    def required_default(self) -> bool:
        return self._required_default

    def validate_type(self, name: str, value):
        """The value to store for ``name``; TypeError naming the field when it has the wrong type."""
        if value is None and not self._required:
            return self.default()
        if isinstance(value, bool) and bool not in self.python_types or not isinstance(value, self.python_types):
            raise TypeError(f"invalid type {type(value).__name__!r} for field {name!r}; expected "
                            f"{' or '.join(t.__name__ for t in self.python_types)}")
        return value

    def schema(self):
        return self.schema_info(set())

    def schema_info(self, defined: set):
        return self.avro_type

    def to_data(self, value, json_form: bool = False):
        return value

    def from_data(self, data):
        return data


class Null(Field):
    avro_type = "null"
    python_types = (type(None),)

    def validate_type(self, name, value):
        if value is not None:
            raise TypeError(f"field {name!r} is a Null field: it can only be None")
        return None


class Boolean(Field):
    avro_type, python_types, empty = "boolean", (bool,), False


class Integer(Field):
    avro_type, python_types = "int", (int,)

    def validate_type(self, name, value):
        value = super().validate_type(name, value)
        if value is not None and not -2**31 <= value < 2**31:
            raise ValueError(f"field {name!r}: {value} does not fit a 32-bit int")
        return value


class Long(Field):
    avro_type, python_types = "long", (int,)


class Float(Field):
    avro_type, python_types = "float", (float, int)


class Double(Field):
    avro_type, python_types = "double", (float, int)


class Bytes(Field):
    avro_type, python_types = "bytes", (bytes, str)

    def validate_type(self, name, value):
        value = super().validate_type(name, value)
        return value.encode() if isinstance(value, str) else value

    def to_data(self, value, json_form=False):
        return value.decode("utf-8", "replace") if json_form and isinstance(value, bytes) else value

    def from_data(self, data):
        return data.encode() if isinstance(data, str) else data


class String(Field):
    avro_type, python_types = "string", (str, bytes)

    def validate_type(self, name, value):
        value = super().validate_type(name, value)
        return value.decode() if isinstance(value, bytes) else value


class CustomEnum(Field):
    """A field whose values are members of an ``enum.Enum``; in Avro an enum of the member names."""

    avro_type = "enum"

    def __init__(self, enum_type, default=None, required=False, required_default=False):
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise TypeError(f"{_name_of(enum_type)} is not an Enum type")
        self.enum_type = enum_type
        self.python_types = (enum_type,)
        super().__init__(default, required, required_default)

    def validate_type(self, name, value):
        if value is None and not self._required:
            return self.default()
        if isinstance(value, self.enum_type):
            return value
        if isinstance(value, str) and value in self.enum_type.__members__:
            return self.enum_type[value]
        if not isinstance(value, (str, bool)):
            try:
                return self.enum_type(value)
            except ValueError:
                pass
        raise TypeError(f"invalid value {value!r} for enum field {name!r}; expected one of "
                        f"{list(self.enum_type.__members__)}")

    def schema_info(self, defined):
        name = self.enum_type.__name__
        if name in defined:
            return name
        defined.add(name)
        return {"type": "enum", "name": name, "symbols": list(self.enum_type.__members__)}

    def to_data(self, value, json_form=False):
        return None if value is None else value.name

    def from_data(self, data):
        # By symbol name (Avro, and JSON as we write it) or by value (the official client's JSON).
        return None if data is None else self.validate_type(self.enum_type.__name__, data)


class Array(Field):
    avro_type, python_types = "array", (list,)

    def __init__(self, array_type, default=None, required=False, required_default=False):
        self.array_type = _as_field(array_type)
        super().__init__(default, required, required_default)

    def validate_type(self, name, value):
        value = super().validate_type(name, value)
        if value is not None:
            value = [self.array_type.validate_type(f"{name}[]", _record_from(self.array_type, v)) for v in value]
        return value

    def schema_info(self, defined):
        return {"type": "array", "items": self.array_type.schema_info(defined)}

    def to_data(self, value, json_form=False):
        return None if value is None else [self.array_type.to_data(v, json_form) for v in value]

    def from_data(self, data):
        return None if data is None else [self.array_type.from_data(v) for v in data]


class Map(Field):
    avro_type, python_types = "map", (dict,)

    def __init__(self, value_type, default=None, required=False, required_default=False):
        self.value_type = _as_field(value_type)
        super().__init__(default, required, required_default)

    def validate_type(self, name, value):
        value = super().validate_type(name, value)
        if value is not None:
            if not all(isinstance(k, str) for k in value):
                raise TypeError(f"map field {name!r} needs string keys")
            value = {k: self.value_type.validate_type(f"{name}[{k!r}]", _record_from(self.value_type, v))
                     for k, v in value.items()}
        return value

    def schema_info(self, defined):
        return {"type": "map", "values": self.value_type.schema_info(defined)}

    def to_data(self, value, json_form=False):
        return None if value is None else {k: self.value_type.to_data(v, json_form) for k, v in value.items()}

    def from_data(self, data):
        return None if data is None else {k: self.value_type.from_data(v) for k, v in data.items()}


def _as_field(x):
    if isinstance(x, type) and issubclass(x, enum.Enum):
        return CustomEnum(x)
    if isinstance(x, type) and issubclass(x, Record):
        return x()
    if isinstance(x, (Field, Record)):
        return x
    raise TypeError(f"{_name_of(x)} is not a Record or a Field")


def _record_from(field, value):
    """A dict given where a nested record is expected becomes that record."""
    if isinstance(field, Record) and isinstance(value, dict):
        return type(field)(**value)
    return value


class RecordMeta(type):
    def __new__(mcs, name, bases, namespace):
        if name != "Record" or bases:
            fields = {}
            for base in reversed(bases):
                fields.update(getattr(base, "_fields", {}))
            for key, value in list(namespace.items()):
                if key.startswith("_"):
                    continue
                if isinstance(value, type) and issubclass(value, enum.Enum) or isinstance(value, RecordMeta):
                    value = _as_field(value)
                if isinstance(value, (Field, Record)):
                    fields[key] = value
                    del namespace[key]
            namespace["_fields"] = fields
        return super().__new__(mcs, name, bases, namespace)


class Record(metaclass=RecordMeta):
    """A record: subclass it with field attributes. Records compare equal field by field."""

    _avro_namespace = None
    _sorted_fields = False
    _fields: dict = {}

    def __init__(self, default=None, required_default: bool = False, required: bool = False, **values):
        # The first three configure a record used as a nested field, as in pulsar.schema.
        object.__setattr__(self, "_default", default)
        object.__setattr__(self, "_required_default", required_default)
        object.__setattr__(self, "_required", required)
        unknown = set(values) - set(self._fields)
        if unknown:
            raise AttributeError(f"{type(self).__name__} has no field(s) {sorted(unknown)}")
        for name, field in self._fields.items():
            if name in values:
                setattr(self, name, _record_from(field, values[name]))
            elif isinstance(field, Record):
                object.__setattr__(self, name, field.default())
            else:
                object.__setattr__(self, name, field.default())

    def __setattr__(self, key, value):
        if key in _RESERVED:
            object.__setattr__(self, key, value)
            return
        field = self._fields.get(key)
        if field is None:
            raise AttributeError(f"cannot set undeclared field {key!r} on {type(self).__name__}")
        object.__setattr__(self, key, field.validate_type(key, value))

    def __eq__(self, other):
        return isinstance(other, Record) and all(getattr(self, f) == getattr(other, f, None) for f in self._fields)

    def __ne__(self, other):
        return not self == other

    __hash__ = None

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self._fields)})"

    __str__ = __repr__

    # ---- as a field of another record ----------------------------------------------------------------

    def type(self) -> str:
        return type(self).__name__

    def python_type(self):
        return type(self)

    def default(self):
        return self._default

    def required_default(self) -> bool:
        return self._required_default

    def validate_type(self, name, value):
        if value is None and not self._required:
            return self.default()
        if not isinstance(value, type(self)):
            raise TypeError(f"invalid type {type(value).__name__!r} for sub-record field {name!r}; "
                            f"expected {type(self).__name__}")
        return value

    # ---- schema and data -----------------------------------------------------------------------------

    @classmethod
    def schema(cls) -> dict:
        """The record's Avro schema as a dict."""
        return cls.schema_info(set())

    @classmethod
    def schema_info(cls, defined: set):
        full = f"{cls._avro_namespace}.{cls.__name__}" if cls._avro_namespace else cls.__name__
        if full in defined:
            return full
        defined.add(full)
        out = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace:
            out["namespace"] = cls._avro_namespace
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        out["fields"] = []
        for name in names:
            field = cls._fields[name]
            kind = field.schema_info(defined)
            entry = {"name": name, "type": kind if field._required else ["null", kind]}
            if field.required_default():
                default = field.default()
                entry["default"] = default.name if isinstance(default, enum.Enum) else default
            out["fields"].append(entry)
        return out

    def to_data(self, value, json_form: bool = False):
        """Plain data of ``value``, a record of this field's type (None stays None)."""
        return None if value is None else value.as_data(json_form)

    def as_data(self, json_form: bool = False) -> dict:
        """This record as plain data: enums by name, nested records as dicts (bytes as text when ``json_form``)."""
        return {name: field.to_data(getattr(self, name), json_form) for name, field in self._fields.items()}

    def from_data(self, data):
        return None if data is None else type(self).from_dict(data)

    @classmethod
    def from_dict(cls, data: dict) -> "Record":
        """A record from plain data (as decoded from Avro or JSON); unknown keys are ignored."""
        values = {}
        for name, field in cls._fields.items():
            if name in data:
                values[name] = field.from_data(data[name])
        return cls(**values)

    def __copy__(self):
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        return clone

    def __deepcopy__(self, memo):
        clone = type(self).__new__(type(self))
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone
