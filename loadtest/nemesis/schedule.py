"""The seeded fault schedule: which fault, when, and how many bookies may be out at once.

``FAULT_KINDS`` is the registry every fault module adds to: kind name -> Fault subclass (instantiated once
per injection, so an instance may remember what it hit for ``heal``). Process faults live in process_faults.py;
network and disk faults in net_faults.py and disk_faults.py, each registered with one line below.
"""

from __future__ import annotations

from loadtest.nemesis.fault import Fault
from loadtest.nemesis.process_faults import PROCESS_FAULTS


def _registry(*groups: list[type[Fault]]) -> dict[str, type[Fault]]:
    kinds: dict[str, type[Fault]] = {}
    for group in groups:
        for cls in group:
            if not cls.kind or cls.kind in kinds:
                raise ValueError(f"fault kind {cls.kind!r} of {cls.__name__} is empty or registered twice")
            kinds[cls.kind] = cls
    return kinds


# Kind name -> Fault subclass. Add a module's list here (e.g. net_faults.NET_FAULTS, disk_faults.DISK_FAULTS).
FAULT_KINDS: dict[str, type[Fault]] = _registry(
    PROCESS_FAULTS,
)
