"""The history: every operation the workload and the nemesis perform, one JSON object a line.

Writers on many threads append through one lock; each event gets ``t``, seconds since the history opened
(monotonic clock), so gaps between acknowledgements are measured on one clock. checker.py reads it back.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path


class History:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", buffering=1)
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._events: list[dict] = []

    def now(self) -> float:
        return round(time.monotonic() - self._start, 6)

    def record(self, f: str, type: str, process: str, **fields) -> dict:
        """Append one event; ``type`` is invoke, ok, fail or unknown."""
        with self._lock:
            event = {"t": self.now(), "f": f, "type": type, "process": process, **fields}
            self._events.append(event)
            self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        return event

    def events(self) -> list[dict]:
        with self._lock:
            return list(self._events)

    def close(self) -> None:
        with self._lock:
            self._file.close()


def load(path: str | Path) -> list[dict]:
    """The events of a history file, in the order they were written."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def message_id(mid) -> list[int]:
    """[ledger, entry, batch, partition] of a pulsar-client or magnetar MessageId."""
    return [mid.ledger_id(), mid.entry_id(), mid.batch_index(), mid.partition()]
