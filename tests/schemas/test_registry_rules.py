"""The registry's pure decisions from tables: which version a schema gets, and which consumers may read a topic."""

from __future__ import annotations

import json

import pytest

from broker.errors import IncompatibleSchemaError
from broker.schemas import SchemaInfo, StoredSchema
from broker.schemas.compatibility import Strategy
from broker.schemas.registry import SchemaPolicies, check_reader, decide, live


def avro(*fields) -> SchemaInfo:
    return SchemaInfo("AVRO", json.dumps({"type": "record", "name": "R", "fields": list(fields)}).encode())


A = avro({"name": "a", "type": "int"})
A_INDENTED = SchemaInfo("AVRO", json.dumps(json.loads(A.data), indent=2).encode())
AB = avro({"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""})
AB_REQUIRED = avro({"name": "a", "type": "int"}, {"name": "b", "type": "string"})
A_STRING = avro({"name": "a", "type": "string"})


def history(*infos) -> list[StoredSchema]:
    return [StoredSchema(i, info, 0) for i, info in enumerate(infos)]


def policies(strategy=Strategy.BACKWARD, auto_update=True) -> SchemaPolicies:
    return SchemaPolicies(strategy, auto_update, False)


# (case, live history, new schema, policies, from a client, expected: a version, None = store anew, or an error)
DECISIONS = [
    ("first schema", [], A, policies(), True, None),
    ("the same schema gets its version", history(A, AB), A, policies(), True, 0),
    ("indentation does not make a new schema", history(A), A_INDENTED, policies(), True, 0),
    ("other properties do make one", history(A), SchemaInfo("AVRO", A.data, {"k": "v"}), policies(), True, None),
    ("a compatible evolution is stored", history(A), AB, policies(), True, None),
    ("an incompatible one is refused", history(A), AB_REQUIRED, policies(), True, IncompatibleSchemaError),
    ("FORWARD takes it", history(A), AB_REQUIRED, policies(Strategy.FORWARD), True, None),
    ("auto update off: clients may not add", history(A), AB, policies(auto_update=False), True, IncompatibleSchemaError),
    ("auto update off: a known schema is fine", history(A), A, policies(auto_update=False), True, 0),
    ("auto update off: the first schema is fine", [], A, policies(auto_update=False), True, None),
    ("auto update off: an admin may add", history(A), AB, policies(auto_update=False), False, None),
    ("ALWAYS_INCOMPATIBLE still finds known versions", history(A), A, policies(Strategy.ALWAYS_INCOMPATIBLE), True, 0),
]


@pytest.mark.parametrize("case,hist,new,pol,client,expected", DECISIONS, ids=[d[0] for d in DECISIONS])
def test_decide(case, hist, new, pol, client, expected):
    if isinstance(expected, type):
        with pytest.raises(expected):
            decide(hist, new, pol, from_client=client)
    else:
        assert decide(hist, new, pol, from_client=client) == expected


def test_live_is_what_follows_the_last_deletion_marker():
    entries = [StoredSchema(0, A, 0), StoredSchema(1, None, 0), StoredSchema(2, AB, 0), StoredSchema(3, AB_REQUIRED, 0)]
    assert [e.version for e in live(entries)] == [2, 3]
    assert live(entries + [StoredSchema(4, None, 0)]) == []
    assert live(entries[:1]) == entries[:1]


# (case, live history, consumer's schema, strategy, may subscribe)
READERS = [
    ("an exact version", history(A_STRING, A), A_STRING, Strategy.BACKWARD, True),
    ("reads the latest", history(A), AB, Strategy.BACKWARD, True),
    ("cannot read the latest", history(A), A_STRING, Strategy.BACKWARD, False),
    ("non-transitive checks the latest only", history(A_STRING, A), AB, Strategy.FULL, True),
    ("transitive checks all", history(A_STRING, A), AB, Strategy.FULL_TRANSITIVE, False),
    ("ALWAYS_COMPATIBLE lets anything in", history(A), A_STRING, Strategy.ALWAYS_COMPATIBLE, True),
    ("another type", history(A), SchemaInfo("STRING"), Strategy.BACKWARD, False),
    ("no schema yet", [], A_STRING, Strategy.BACKWARD, True),
]


@pytest.mark.parametrize("case,hist,reader,strategy,ok", READERS, ids=[r[0] for r in READERS])
def test_check_reader(case, hist, reader, strategy, ok):
    if ok:
        check_reader(hist, reader, strategy)
    else:
        with pytest.raises(IncompatibleSchemaError):
            check_reader(hist, reader, strategy)
