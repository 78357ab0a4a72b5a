"""Journal damage that is not a torn tail: the verdict table, each branch on a real bookie, and `bookie start`."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path

import pytest

from storage import digest, protocol as p
from storage.bookie.cli import EXIT_REFUSED
from storage.bookie.config import BookieConfig
from storage.bookie.disk_monitor import WRITABLE, decide_mode
from storage.bookie.journal import (
    ADD,
    JournalDamage,
    JournalRecord,
    RecordScanner,
    encode_record,
    journal_file_name,
    list_journal_files,
)
from storage.bookie.journal_damage import Action, journal_verdict, quarantine
from storage.bookie.process import BookieService
from storage.errors import BookieInternalError, BookieReadOnlyError, BookieStartupError, NoSuchEntryError
from storage.ledger_metadata import LedgerMetadata
from storage.metadata import open_store, paths
from storage.testing.processes import BookieProcess, http_status
from storage.testing.waiting import wait_until
from tests.bookie.support import KEY, Conn, add, config_for

NEVER_MS = 3_600_000  # no periodic checkpoint: the adds stay after the journal mark
ENTRIES = 6
DAMAGED_ENTRY = 2


def damage(path="/j/journal-3.log", offset=120, after=2, later=False) -> JournalDamage:
    return JournalDamage(3, Path(path), offset, "record crc mismatch", after, frozenset({1}), later)


TORN = damage(after=0)


@pytest.mark.parametrize("found, policy, unreplicated, action, words", [
    ([], "auto", [], Action.START, []),
    ([TORN], "auto", [5], Action.START, []),  # a crash tear loses nothing acknowledged
    ([TORN], "refuse", [], Action.START, []),
    ([damage()], "auto", [], Action.READ_ONLY, ["/j/journal-3.log is corrupt at offset 120", "followed by 2 valid"]),
    ([damage(after=0, later=True)], "auto", [], Action.READ_ONLY, ["later journal files were written after it"]),
    ([TORN, damage()], "auto", [7, 5], Action.REFUSE,
     ["offset 120", "ledger(s) 5, 7 have ack quorum 1", "move it into /j/damaged/"]),
    ([damage()], "refuse", [], Action.REFUSE, ["offset 120", "journal_corruption_policy is 'refuse'"]),
])
def test_verdict_table(found, policy, unreplicated, action, words):
    verdict = journal_verdict(found, policy, unreplicated)
    assert verdict.action is action
    for w in words:
        assert w in verdict.message
    assert "torn tail" not in verdict.message  # torn tails are never what a verdict is about


def test_policy_is_checked():
    with pytest.raises(ValueError, match="journal_corruption_policy"):
        journal_verdict([damage()], "ignore", [])
    with pytest.raises(ValueError, match="journal_corruption_policy must be 'auto' or 'refuse'"):
        BookieConfig(metadata_store_url="mem://", data_dir=Path("/tmp/x"), journal_corruption_policy="x").validate()


def test_quarantine_copies_once_and_keeps_a_different_file_of_the_same_name(tmp_path):
    journal_dir = tmp_path / "journal"
    journal_dir.mkdir()
    path = journal_dir / "journal-3.log"
    path.write_bytes(b"first")
    found = damage(path=str(path))
    # A crash after the copy and before the checkpoint replays the same file again.
    assert quarantine(journal_dir, [found]) == quarantine(journal_dir, [found]) == [journal_dir / "damaged" / path.name]
    path.write_bytes(b"second")  # a later damaged file that reuses the number
    assert quarantine(journal_dir, [found]) == [journal_dir / "damaged" / "journal-3.log.1"]
    assert sorted(f.name for f in (journal_dir / "damaged").iterdir()) == ["journal-3.log", "journal-3.log.1"]
    assert path.read_bytes() == b"second"  # copied, not moved


def test_quarantined_damage_outranks_the_operator_override_but_not_a_failed_journal():
    config = BookieConfig(metadata_store_url="mem://", data_dir=Path("/tmp/x"))
    why = "journal files journal-3.log in /j/damaged lost records"
    assert decide_mode(0.1, WRITABLE, config, forced=False, journal_damage=why).reason == why
    assert decide_mode(0.1, WRITABLE, config, forced=False, journal_damage=why).read_only
    failed = decide_mode(0.1, WRITABLE, config, journal_error=OSError("EIO"), journal_damage=why)
    assert failed.read_only and failed.reason == "journal failed: EIO"
    assert not decide_mode(0.1, WRITABLE, config, forced=False).read_only


# ---- a real bookie (in process) on a damaged journal -----------------------------


def ledger(ledger_id: int, bookie_id: str, ack_quorum: int) -> LedgerMetadata:
    return LedgerMetadata(ledger_id, 3, 3, ack_quorum, b"", ((0, (bookie_id, "other-1:3181", "other-2:3181")),))


def last_journal_file(journal_dir: Path) -> Path:
    return Path(journal_dir) / journal_file_name(list_journal_files(Path(journal_dir))[-1])


def corrupt_entry_record(journal_dir: Path, entry_id: int) -> tuple[Path, int]:
    """Flip one body byte of the ADD record of ``entry_id``; returns (file, record offset)."""
    path = last_journal_file(journal_dir)
    raw = bytearray(path.read_bytes())
    offset = 0
    for record, end in RecordScanner(bytes(raw)):
        if record.kind == ADD and record.entry_id == entry_id:
            raw[end - 1] ^= 0x01
            path.write_bytes(bytes(raw))
            return path, offset
        offset = end
    raise AssertionError(f"no ADD record for entry {entry_id} in {path}")


async def write_then_crash(config, store, ack_quorum: int) -> None:
    await store.create(paths.ledger_path(1), ledger(1, config.bookie_id, ack_quorum).to_bytes(), make_parents=True)
    service = await BookieService.start(config, store=store)
    conn = await Conn.open(service.port)
    for e in range(ENTRIES):
        assert (await conn.request(add(e, 1, e, b"entry-%d" % e))).status == p.OK
    await conn.close()
    await service.bookie.halt()  # a crash: the adds live only in the journal
    await service.stop()


@pytest.fixture
async def store():
    s = await open_store(f"memory://{uuid.uuid4().hex}")
    yield s
    await s.close()


async def test_auto_starts_read_only_quarantines_and_will_not_vouch_for_missing_entries(tmp_path, store):
    config = config_for(tmp_path, flush_interval_ms=NEVER_MS)
    await write_then_crash(config, store, ack_quorum=2)
    path, offset = corrupt_entry_record(config.journal_dir, DAMAGED_ENTRY)
    original = path.read_bytes()

    service = await BookieService.start(config, store=store)
    assert service.read_only
    assert await store.exists(paths.readonly_path(config.bookie_id)) is not None
    assert await store.exists(paths.available_path(config.bookie_id)) is None
    assert "lost records" in service.info()["state_reason"]
    assert (config.journal_dir / "damaged" / path.name).read_bytes() == original
    assert not path.exists()  # the start-up checkpoint flushed its proven prefix and removed it
    assert service.bookie.replayed_records == 1 + DAMAGED_ENTRY  # the master key and the entries before the damage

    conn = await Conn.open(service.port)
    for e in range(DAMAGED_ENTRY):  # the proven prefix is served
        read = await conn.request(p.ReadRequest(10 + e, 1, e))
        assert read.status == p.OK and digest.verify(read.body, 1, e).payload == b"entry-%d" % e
    lost = DAMAGED_ENTRY + 1  # valid in the file, after the damage: not replayed
    assert (await conn.request(p.ReadRequest(20, 1, lost))).status == NoSuchEntryError.code
    # Recovery's fencing read must not take "lost here" for "never written".
    assert (await conn.request(p.ReadRequest(21, 1, lost, p.FLAG_FENCE, KEY))).status == BookieInternalError.code
    tail = await conn.request(p.ReadRequest(22, 1, p.LAST_ENTRY, p.FLAG_FENCE, KEY))
    assert tail.status == p.OK and digest.verify(tail.body, 1, DAMAGED_ENTRY - 1)
    assert (await conn.request(add(23, 2, 0))).status == BookieReadOnlyError.code
    await conn.close()
    await service.stop()

    service = await BookieService.start(config, store=store)  # still quarantined: still read-only
    assert service.read_only
    await service.stop()
    for f in (config.journal_dir / "damaged").iterdir():  # the operator, once autorecovery has repaired
        f.unlink()
    service = await BookieService.start(config, store=store)
    assert not service.read_only
    conn = await Conn.open(service.port)
    assert (await conn.request(p.ReadRequest(30, 1, lost, p.FLAG_FENCE, KEY))).status == NoSuchEntryError.code
    await conn.close()
    await service.stop()


@pytest.mark.parametrize("policy, ack_quorum, words", [
    ("auto", 1, "ledger(s) 1 have ack quorum 1"),
    ("refuse", 2, "journal_corruption_policy is 'refuse'"),
])
async def test_refuses_to_start_and_changes_nothing(tmp_path, store, policy, ack_quorum, words):
    config = config_for(tmp_path, flush_interval_ms=NEVER_MS, journal_corruption_policy=policy)
    await write_then_crash(config, store, ack_quorum)
    path, offset = corrupt_entry_record(config.journal_dir, DAMAGED_ENTRY)
    before = {f.name: f.read_bytes() for f in config.journal_dir.glob("journal-*.log")}

    with pytest.raises(BookieStartupError) as info:
        await BookieService.start(config, store=store)
    message = str(info.value)
    assert f"journal {path} is corrupt at offset {offset} (record crc mismatch)" in message
    assert f"followed by {ENTRIES - DAMAGED_ENTRY - 1} valid records" in message and words in message
    assert {f.name: f.read_bytes() for f in config.journal_dir.glob("journal-*.log")} == before
    assert not (config.journal_dir / "damaged").exists()
    assert await store.exists(paths.available_path(config.bookie_id)) is None
    assert await store.exists(paths.readonly_path(config.bookie_id)) is None


async def test_a_torn_tail_is_truncated_and_the_bookie_starts_writable(tmp_path, store):
    config = config_for(tmp_path, flush_interval_ms=NEVER_MS)
    await write_then_crash(config, store, ack_quorum=1)
    torn = encode_record(JournalRecord(ADD, 1, ENTRIES, digest.package(1, ENTRIES, 0, 1, b"never acked")))
    with open(last_journal_file(config.journal_dir), "ab") as fh:
        fh.write(torn[: len(torn) // 2])
    service = await BookieService.start(config, store=store)
    assert not service.read_only and service.bookie.journal_damage is None
    assert service.bookie.replayed_records == 1 + ENTRIES
    await service.stop()


# ---- `bookie start` as a real process --------------------------------------------


async def damaged_bookie_dir(tmp_path, ack_quorum: int) -> tuple[BookieProcess, Path, int]:
    """A bookie process that took ENTRIES adds to ledger 1 and was killed; one journal record then went bad."""
    url = f"file://{tmp_path / 'metadata'}"
    bookie = BookieProcess(url, tmp_path / "b0" / "data", zone="zone-a",
                           env={"MAGNETAR_BOOKIE_FLUSH_INTERVAL_MS": str(NEVER_MS)})
    store = await open_store(url)  # file:// allows one process at a time: only while the bookie is down
    try:
        await store.create(paths.ledger_path(1), ledger(1, bookie.bookie_id, ack_quorum).to_bytes(),
                           make_parents=True)
    finally:
        await store.close()
    try:
        bookie.start()
        conn = await Conn.open(bookie.port)
        for e in range(ENTRIES):
            assert (await conn.request(add(e, 1, e, b"entry-%d" % e))).status == p.OK
        await conn.close()
    finally:
        bookie.kill9()
    path, offset = corrupt_entry_record(bookie.data_dir / "journal", DAMAGED_ENTRY)
    return bookie, path, offset


def ready_mode(bookie: BookieProcess) -> str:
    wait_until(lambda: " ready (" in bookie.log_path.read_text(errors="replace"), 30, "the ready line")
    ready = [line for line in bookie.log_path.read_text(errors="replace").splitlines() if " ready (" in line]
    return "read-only" if "; read-only;" in ready[-1] else "writable"


async def test_bookie_start_on_a_corrupt_journal_exits_naming_file_and_offset_then_starts_read_only(tmp_path):
    bookie, path, offset = await damaged_bookie_dir(tmp_path, ack_quorum=1)
    journal_dir = path.parent
    try:
        assert bookie.spawn().wait(60) == EXIT_REFUSED
        text = bookie.log_path.read_text(errors="replace")
        assert f"bookie: refusing to start: journal {path} is corrupt at offset {offset}" in text
        assert "ledger(s) 1 have ack quorum 1" in text and "Traceback" not in text

        # The operator accepts the loss: the file goes aside and the bookie serves what it has, read-only.
        (journal_dir / "damaged").mkdir()
        path.rename(journal_dir / "damaged" / path.name)
        bookie.start()
        assert ready_mode(bookie) == "read-only"
        assert http_status(bookie.health_url) == 200
        assert bookie.stop() == 0
    finally:
        bookie.kill9()


async def test_bookie_start_on_a_corrupt_journal_with_replicated_ledgers_starts_read_only(tmp_path):
    bookie, path, offset = await damaged_bookie_dir(tmp_path, ack_quorum=2)
    try:
        bookie.start()
        assert ready_mode(bookie) == "read-only"
        text = bookie.log_path.read_text(errors="replace")
        assert f"journal {path} is corrupt at offset {offset}" in text and "starts read-only" in text
        with urllib.request.urlopen(f"http://127.0.0.1:{bookie.http_port}/api/v1/bookie/info", timeout=10) as r:
            info = json.loads(r.read())
        assert info["state"] == "readonly" and "lost records" in info["state_reason"]
        assert (path.parent / "damaged" / path.name).exists()
        assert bookie.stop() == 0
    finally:
        bookie.kill9()
