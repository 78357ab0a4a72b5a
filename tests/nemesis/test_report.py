"""The BENCHMARKS.md section: written from a result, replacing only its own section."""

from __future__ import annotations

from loadtest.nemesis.checker import check
from loadtest.nemesis.markdown import HEADING, write_section


def result(valid: bool) -> dict:
    events = [{"t": 1.0, "f": "send", "type": "invoke", "process": "p1", "topic": "t", "value": "p1:0"},
              {"t": 1.1, "f": "send", "type": "ok", "process": "p1", "topic": "t", "value": "p1:0", "id": [1, 0, -1, -1]}]
    if valid:
        events.append({"t": 2.0, "f": "final-read", "type": "ok", "process": "final", "topic": "t", "value": "p1:0",
                       "id": [1, 0, -1, -1]})
    return {"seed": 9, "rounds": 3, "replay": "python -m loadtest.nemesis --seed 9 --rounds 3", "duration_s": 60.0,
            "machine": {"time": "2026-11-24T21:00:00Z", "cpus": 2}, "faults": {"kill-broker": 3}, "bookie_budget": 1,
            **check(events).to_json()}


def test_the_section_replaces_itself_and_leaves_the_rest_of_the_page(tmp_path):
    page = tmp_path / "BENCHMARKS.md"
    page.write_text("# Benchmarks\n\n## Failover\n\nkept\n\n## TLS\n\nalso kept\n")
    write_section(result(valid=False), tmp_path)
    first = page.read_text()
    assert first.count(HEADING) == 1 and "VIOLATIONS FOUND" in first and "| acknowledged, then lost | 1 | yes |" in first
    write_section(result(valid=True), tmp_path)
    second = page.read_text()
    assert second.count(HEADING) == 1 and "**no violation**" in second and "VIOLATIONS" not in second
    assert "## Failover\n\nkept" in second and "## TLS\n\nalso kept" in second
    assert "| kill-broker | 3 |" in second and "--seed 9 --rounds 3" in second
