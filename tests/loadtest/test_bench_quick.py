"""The benchmark code path in --quick form, so it cannot rot: well-formed JSON with every field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ledger_suite_quick_writes_complete_json(tmp_path):
    out = tmp_path / "ledger.json"
    result = subprocess.run([sys.executable, "-m", "loadtest.bench", "ledger", "--quick", "--out", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "1 KiB adds" in result.stdout and "disk fdatasync 64 KiB" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["suite"] == "ledger" and doc["machine"]["cpus"] >= 1
    r = doc["results"]
    for run in ("throughput_1k", "throughput_64k"):
        assert r[run]["entries_per_s"] > 0 and r[run]["mb_per_s"] > 0
        assert 0 < r[run]["add_p50_ms"] <= r[run]["add_p99_ms"] <= r[run]["add_max_ms"]
    assert r["steady_1000_per_s"]["entries"] == 3000 and r["steady_1000_per_s"]["add_p99_ms"] > 0
    assert r["disk_64k"]["mb_per_s"] > 0 and r["physical_limit_64k_mb_per_s"] > 0
    assert r["ratio_64k_to_physical"] == r["throughput_64k"]["mb_per_s"] / r["physical_limit_64k_mb_per_s"]
    assert r["ratio_64k_to_sequential_limit"] == r["throughput_64k"]["mb_per_s"] / r["sequential_limit_mb_per_s"]
