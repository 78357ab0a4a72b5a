"""The real `bookie start` console script as a subprocess (through the test harness), on a file:// metadata store.

No ZooKeeper needed: the file:// store is persisted, and one process at a
time may hold it, so every check of the metadata happens between runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from storage.bookie.cli import EXIT_REFUSED, build_parser
from storage.metadata import open_store, paths
from storage.testing.processes import VENV_BIN, BookieProcess, http_status
from storage.testing.waiting import wait_until


@pytest.fixture
def bookie(tmp_path):
    process = BookieProcess(f"file://{tmp_path / 'metadata'}", tmp_path / "b0" / "data", zone="zone-a")
    yield process
    if process.alive:
        process.kill9()


def output(process: BookieProcess) -> str:
    return process.log_path.read_text(errors="replace")


def test_start_prints_ready_serves_and_stops_cleanly_on_sigterm(bookie):
    bookie.start()
    line = wait_until(lambda: next((l for l in output(bookie).splitlines() if " ready (" in l), None), 10,
                      "the ready line")
    assert line.startswith(f"bookie {bookie.bookie_id} ready (zone zone-a, /zone-a/ud1;"), line
    assert f"http 127.0.0.1:{bookie.http_port}" in line and "writable" in line
    assert http_status(f"http://127.0.0.1:{bookie.http_port}/health") == 200
    assert bookie.stop() == 0
    assert "Traceback" not in output(bookie)


async def test_restart_on_a_wrong_data_dir_exits_2_with_the_reason(bookie, tmp_path):
    bookie.start()
    assert bookie.stop() == 0
    store = await open_store(bookie.metadata_url)
    try:
        assert await store.exists(paths.cookie_path(bookie.bookie_id)) is not None
        assert await store.exists(paths.available_path(bookie.bookie_id)) is None  # deregistered (ephemeral)
    finally:
        await store.close()

    right_dir = bookie.data_dir
    bookie.data_dir = tmp_path / "wiped" / "data"
    assert bookie.spawn().wait(30) == EXIT_REFUSED
    text = output(bookie)
    assert "bookie: refusing to start:" in text
    assert f"journal dir {(bookie.data_dir / 'journal').resolve()} has no cookie but the metadata store has one" in text
    assert "the data dir was wiped or --data-dir points at the wrong place" in text
    assert "Traceback" not in text

    bookie.data_dir = right_dir
    bookie.start()  # the right dir still works
    assert bookie.stop() == 0


def run_cli(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "bookie"), *args], capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--network-location", "zone-a"], "network location must look like /zone/upgradeDomain"),
        (["--port", "70000"], "port must be in 1..65535"),
        (["--metadata-store", "etcd://x"], "unknown metadata store scheme 'etcd'"),
    ],
)
def test_bad_configuration_exits_2_with_one_clear_line(tmp_path, args, words):
    base = {"--metadata-store": f"file://{tmp_path / 'md'}", "--data-dir": str(tmp_path / "data"),
            "--network-location": "/zone-a/ud1", "--port": "3181", "--http-port": "0"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    result = run_cli("start", *[x for kv in base.items() for x in kv])
    assert result.returncode == EXIT_REFUSED, result
    assert words in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_toml_env_and_flags_in_order_of_precedence(tmp_path):
    toml = tmp_path / "bookie.toml"
    toml.write_text('[bookie]\nno_such_key = 3\n')
    result = run_cli("start", "--config", str(toml), "--metadata-store", "memory://x", "--data-dir", str(tmp_path))
    assert result.returncode == EXIT_REFUSED and "unknown bookie config key 'no_such_key'" in result.stderr

    toml.write_text('[bookie]\nadvertised_address = "localhost"\nport = 1\nnetwork_location = "/zone-t/ud9"\n'
                    'disk_usage_threshold = 0.99\ndisk_usage_lwm_threshold = 0.98\n')
    process = BookieProcess(f"file://{tmp_path / 'md'}", tmp_path / "data", zone="zone-f",
                            extra_args=["--config", str(toml)],
                            env={"MAGNETAR_BOOKIE_DISK_USAGE_THRESHOLD": "0.0001",
                                 "MAGNETAR_BOOKIE_DISK_USAGE_LWM_THRESHOLD": "0.00005"})
    try:
        process.start()
        line = wait_until(lambda: next((l for l in output(process).splitlines() if " ready (" in l), None), 10,
                          "the ready line")
        # TOML: advertised address; flags beat TOML: port, network location; env beats TOML: the threshold.
        assert line.startswith(f"bookie localhost:{process.port} ready (zone zone-f, /zone-f/ud1;"), line
        assert "read-only" in line
    finally:
        assert process.stop() == 0


def test_parser_has_the_subcommands_the_lead_extends():
    parser = build_parser()
    args = parser.parse_args(["start", "--metadata-store", "zk://h:2181/c", "--data-dir", "/d", "--port", "3182",
                              "--http-port", "8001", "--network-location", "/z/u", "--host", "0.0.0.0",
                              "--advertised-address", "b1.example"])
    assert (args.command, args.metadata_store_url, args.port, args.advertised_address) == \
        ("start", "zk://h:2181/c", 3182, "b1.example")
    assert parser.parse_args(["standalone"]).command == "standalone"
    assert Path(parser.parse_args(["standalone", "--data-dir", "x"]).data_dir) == Path("x")


def test_autorecovery_settings_come_from_flags_and_env():
    from storage.autorecovery.config import AutoRecoveryConfig, load_autorecovery_config
    from storage.bookie.cli import _configs

    parser = build_parser()
    args = parser.parse_args(["start", "--metadata-store", "zk://h:2181/c", "--data-dir", "/d",
                              "--lost-bookie-recovery-delay-s", "2.5", "--no-autorecovery"])
    (config,) = _configs(args)
    assert (config.lost_bookie_recovery_delay_s, config.autorecovery_enabled) == (2.5, False)
    assert AutoRecoveryConfig.from_bookie(config).lost_bookie_recovery_delay_s == 2.5
    (default,) = _configs(parser.parse_args(["start", "--metadata-store", "zk://h:2181/c", "--data-dir", "/d"]))
    assert default.autorecovery_enabled and default.lost_bookie_recovery_delay_s == 60.0

    env = {"MAGNETAR_BOOKIE_LOST_BOOKIE_RECOVERY_DELAY_S": "7", "MAGNETAR_BOOKIE_DATA_DIR": "/elsewhere"}
    assert load_autorecovery_config({}, env).lost_bookie_recovery_delay_s == 7.0
    assert load_autorecovery_config({"lost_bookie_recovery_delay_s": 3}, env).lost_bookie_recovery_delay_s == 3.0
    with pytest.raises(ValueError, match="must be >= 0"):
        load_autorecovery_config({"lost_bookie_recovery_delay_s": -1}, {})
