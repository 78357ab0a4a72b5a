"""Reading libFuzzer's report (a pure function of its text, so it is tested from sample outputs)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STATS = re.compile(r"^#(?P<runs>\d+)\s+(?P<event>\w+)\s+cov: (?P<cov>\d+) ft: (?P<ft>\d+) corp: (?P<corp>\d+)/", re.M)
_DONE = re.compile(r"^Done (?P<runs>\d+) runs in", re.M)
_ARTIFACT = re.compile(r"Test unit written to (?P<path>\S+)")
_CRASH_MARKERS = ("=== Uncaught Python exception: ===", "ERROR: libFuzzer:")


@dataclass
class LibFuzzerResult:
    runs: int | None = None  # inputs executed, from "Done N runs" (or the last stats line)
    cov: int | None = None
    ft: int | None = None
    corpus: int | None = None
    crashed: bool = False
    crash_files: list[str] = field(default_factory=list)


def parse_libfuzzer(text: str) -> LibFuzzerResult:
    result = LibFuzzerResult()
    stats = list(_STATS.finditer(text))
    if stats:
        last = stats[-1]
        result.runs, result.cov, result.ft, result.corpus = (int(last["runs"]), int(last["cov"]), int(last["ft"]),
                                                              int(last["corp"]))
    done = _DONE.search(text)
    if done:
        result.runs = int(done["runs"])
    result.crashed = any(marker in text for marker in _CRASH_MARKERS)
    result.crash_files = [m["path"] for m in _ARTIFACT.finditer(text)]
    return result
