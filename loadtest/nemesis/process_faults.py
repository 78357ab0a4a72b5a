"""Process faults: kill -9 and restart, SIGSTOP past the session timeout, a ZooKeeper outage, a lost bookie."""

from __future__ import annotations

from loadtest.nemesis.fault import Fault

PROCESS_FAULTS: list[type[Fault]] = []
