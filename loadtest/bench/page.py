"""docs/BENCHMARKS.md as text: find one ``## `` section, keep it, replace it.

`bench all --report` writes the whole page but carries the Nemesis section over from the page it replaces (a
nemesis run is long and separate from `all`); `python -m loadtest.nemesis --report` replaces that one section and
leaves the rest. Both use these helpers, so a section ends where the other writer expects it to.
"""

from __future__ import annotations

import re
from pathlib import Path

NEMESIS_HEADING = "## Nemesis"
RUN_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def section_bounds(lines: list[str], heading: str) -> tuple[int, int] | None:
    """Where the section sits in the page's lines: its heading up to the next ``## `` heading."""
    if heading not in lines:
        return None
    start = lines.index(heading)
    return start, next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))


def existing_section(path: str | Path, heading: str) -> list[str] | None:
    """The section as the page at ``path`` has it (ending in one blank line), or None if it has none."""
    path = Path(path)
    lines = path.read_text().rstrip("\n").split("\n") if path.exists() else []
    bounds = section_bounds(lines, heading)
    if bounds is None:
        return None
    kept = lines[bounds[0]:bounds[1]]
    while kept and not kept[-1].strip():
        kept.pop()
    return [*kept, ""]


def run_time(section_lines: list[str]) -> str | None:
    """The first UTC timestamp the section states: when the run it reports happened."""
    found = RUN_TIME.search("\n".join(section_lines))
    return found.group(0) if found else None
