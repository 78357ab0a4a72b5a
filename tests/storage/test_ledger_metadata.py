import pytest

from storage.errors import InvalidQuorumError, LedgerMetadataError
from storage.ledger_metadata import LedgerMetadata, LedgerState, master_key, validate_quorum
from storage.metadata import paths


def make(**kw):
    base = dict(ledger_id=1, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2, password=b"pw",
                ensembles=((0, ("a", "b", "c")),))
    base.update(kw)
    return LedgerMetadata(**base)


def test_round_trip_through_json():
    md = make(custom={"topic": "t"}).with_fragment(10, ("a", "d", "c"))
    assert LedgerMetadata.from_bytes(md.to_bytes()) == md


def test_write_set_stripes_from_entry_mod_ensemble():
    md = make()
    assert [md.write_set(e) for e in range(4)] == [["a", "b"], ["b", "c"], ["c", "a"], ["a", "b"]]


def test_fragment_lookup_after_ensemble_change():
    md = make().with_fragment(5, ("a", "d", "c"))
    assert md.ensemble_for(4) == ("a", "b", "c")
    assert md.ensemble_for(5) == ("a", "d", "c")
    assert md.write_set(7) == ["d", "c"]


@pytest.mark.parametrize(
    "old, new, legal",
    [
        (LedgerState.OPEN, LedgerState.IN_RECOVERY, True),
        (LedgerState.OPEN, LedgerState.CLOSED, True),
        (LedgerState.IN_RECOVERY, LedgerState.CLOSED, True),
        (LedgerState.IN_RECOVERY, LedgerState.IN_RECOVERY, True),
        (LedgerState.CLOSED, LedgerState.OPEN, False),
        (LedgerState.CLOSED, LedgerState.IN_RECOVERY, False),
        (LedgerState.IN_RECOVERY, LedgerState.OPEN, False),
    ],
)
def test_state_table(old, new, legal):
    md = make(state=old)
    if legal:
        assert md.with_state(new).state is new
    else:
        with pytest.raises(LedgerMetadataError, match="illegal ledger state transition"):
            md.with_state(new)


def test_closed_ledger_takes_no_fragment():
    with pytest.raises(LedgerMetadataError):
        make(state=LedgerState.CLOSED).with_fragment(3, ("a", "b", "d"))


def test_invalid_json_is_a_metadata_error():
    with pytest.raises(LedgerMetadataError):
        LedgerMetadata.from_bytes(b'{"state": "BOGUS"}')


def test_master_key_depends_on_password():
    assert master_key(b"a") != master_key(b"b") and len(master_key(b"")) == 32


@pytest.mark.parametrize("ledger_id, path", [(1, "/ledgers/00/0000/L0001"), (1234567890, "/ledgers/12/3456/L7890")])
def test_hierarchical_ledger_paths(ledger_id, path):
    assert paths.ledger_path(ledger_id) == path
    assert paths.ledger_id_from_path(path) == ledger_id


@pytest.mark.parametrize("sizes, ok", [
    ((3, 2, 2), True), ((1, 1, 1), True), ((5, 5, 3), True),
    ((2, 3, 2), False),  # Qw > E
    ((3, 2, 3), False),  # Qa > Qw
    ((3, 2, 0), False), ((0, 0, 0), False),
    ((3.0, 2, 2), False),  # sizes are counts of bookies
])
def test_quorum_sizes_are_checked_in_one_place(sizes, ok):
    if ok:
        validate_quorum(*sizes)
    else:
        with pytest.raises(InvalidQuorumError, match="need ensemble >= write quorum >= ack quorum >= 1"):
            validate_quorum(*sizes)
