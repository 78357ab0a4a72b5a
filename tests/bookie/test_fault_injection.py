"""What the bookie offers fault tests, and only them: the journal's fault switches, ``advertised_port``
(a forwarder in front of the bookie), and ``bookie readlog`` (an entry log's records, for a bit flip)."""

from __future__ import annotations

import errno
import json
import time

import pytest

from storage.bookie.cli import EXIT_REFUSED, main
from storage.bookie.config import BookieConfig
from storage.bookie.entrylog import EntryLogger
from storage.bookie.faults import MAX_FSYNC_DELAY_S, JournalFaults, fault_injection_enabled
from storage.bookie.registration import Registration


@pytest.mark.parametrize("environ, enabled", [
    ({}, False), ({"MAGNETAR_FAULT_INJECTION": ""}, False), ({"MAGNETAR_FAULT_INJECTION": "0"}, False),
    ({"MAGNETAR_FAULT_INJECTION": "1"}, True),
])
def test_fault_injection_mode_is_off_unless_asked_for(environ, enabled):
    assert fault_injection_enabled(environ) is enabled


def test_journal_fault_switches_delay_or_fail_each_fsync():
    synced = []
    faults = JournalFaults(real_fsync=synced.append)
    faults.set_switches(0.05, None)
    started = time.perf_counter()
    faults(7)
    assert time.perf_counter() - started >= 0.05 and synced == [7]
    faults.set_switches(0, errno.ENOSPC)
    with pytest.raises(OSError) as err:
        faults(7)
    assert err.value.errno == errno.ENOSPC and synced == [7]  # the failed fsync never reached the disk
    assert faults.switches() == {"fsyncDelayMs": 0, "fsyncError": "ENOSPC", "fsyncs": 2}
    faults.set_switches(0, None)
    faults(8)
    assert synced == [7, 8]


@pytest.mark.parametrize("delay_s, code", [(-0.001, None), (MAX_FSYNC_DELAY_S + 1, None), (0, 99999)])
def test_journal_fault_switches_are_bounded(delay_s, code):
    with pytest.raises(ValueError):
        JournalFaults().set_switches(delay_s, code)


@pytest.mark.parametrize("advertised_port, bookie_id, address", [
    (None, "127.0.0.1:3181", "127.0.0.1:3181"),
    (40001, "127.0.0.1:40001", "127.0.0.1:40001"),  # peers dial the forwarder, and know the bookie by it
])
def test_advertised_port_names_the_bookie_and_its_registered_address(advertised_port, bookie_id, address):
    config = BookieConfig("memory://x", "/tmp/unused", port=3181, advertised_port=advertised_port).validate()
    assert config.bookie_id == bookie_id

    class Store:
        def add_session_listener(self, _):
            pass

    assert Registration(Store(), config, 8000).describe()["address"] == address


def test_advertised_port_is_checked():
    with pytest.raises(ValueError, match="advertised_port"):
        BookieConfig("memory://x", "/tmp/unused", advertised_port=70000).validate()


def test_readlog_lists_every_record_of_the_entry_logs(tmp_path, capsys):
    logger = EntryLogger(tmp_path, 1024 * 1024)
    locations = [logger.append(5, e, bytes([e]) * (10 + e)) for e in range(3)]
    logger.flush()
    logger.close()
    assert main(["readlog", str(tmp_path)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["ledger_id"], r["entry_id"], r["offset"], r["length"]) for r in records] == [
        (5, e, loc.offset, loc.length) for e, loc in enumerate(locations)]
    assert main(["readlog", str(tmp_path / "missing")]) == EXIT_REFUSED
