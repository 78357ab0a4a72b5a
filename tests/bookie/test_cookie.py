"""Cookie rules as a table, and a real start refusal on a wiped or wrong data dir."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from storage.bookie.config import load_config
from storage.bookie.cookie import Cookie, Decision, check_and_write_cookie, decide
from storage.errors import CookieMismatchError
from storage.metadata import open_store, paths

GOOD = Cookie("inst", "127.0.0.1:3181", "/d/journal", "/d/ledgers", "/zone-a/ud1")
OTHER_DIR = replace(GOOD, ledger_dir="/elsewhere/ledgers", journal_dir="/elsewhere/journal")


@pytest.mark.parametrize(
    "journal, ledger, metadata, expected, outcome",
    [
        (None, None, None, GOOD, Decision.WRITE_NEW),
        (GOOD, GOOD, GOOD, GOOD, Decision.OK),
        (GOOD, GOOD, GOOD, replace(GOOD, network_location="/zone-b/ud1"), Decision.UPDATE_NETWORK_LOCATION),
        (None, None, GOOD, GOOD, "journal dir /d/journal has no cookie but the metadata store holds one"),
        (GOOD, None, GOOD, GOOD, "ledger dir /d/ledgers has no cookie"),
        (GOOD, GOOD, None, GOOD, "the metadata store has none for this bookie"),
        (GOOD, replace(GOOD, bookie_id="other:1"), GOOD, GOOD, "journal and ledger dir cookies disagree"),
        (GOOD, GOOD, replace(GOOD, instance_id="new"), GOOD, "instance_id is 'inst', expected 'new'"),
        (OTHER_DIR, OTHER_DIR, OTHER_DIR, GOOD, "ledger_dir is '/elsewhere/ledgers', expected '/d/ledgers'"),
        (GOOD, GOOD, GOOD, replace(GOOD, bookie_id="127.0.0.1:9999"), "bookie_id is '127.0.0.1:3181'"),
    ],
)
def test_decision_table(journal, ledger, metadata, expected, outcome):
    if isinstance(outcome, Decision):
        assert decide(journal, ledger, metadata, expected) is outcome
    else:
        with pytest.raises(CookieMismatchError, match=outcome.replace("(", r"\(").replace(")", r"\)")):
            decide(journal, ledger, metadata, expected)


def config(tmp_path, data="data", location="/zone-a/ud1"):
    return load_config(overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path / data),
                                  "port": 3181, "network_location": location}, environ={})


async def test_first_start_writes_cookies_and_restart_accepts_them(tmp_path):
    store = await open_store(f"memory://{uuid.uuid4().hex}")
    cfg = config(tmp_path)
    written = await check_and_write_cookie(store, cfg)
    assert (cfg.journal_dir / "cookie").exists() and (cfg.ledger_dir / "cookie").exists()
    data, _ = await store.get(paths.cookie_path(cfg.bookie_id))
    assert Cookie.from_bytes(data, "metadata") == written
    assert written.instance_id == (await store.get(paths.INSTANCE_ID))[0].decode()
    assert await check_and_write_cookie(store, cfg) == written
    moved = await check_and_write_cookie(store, config(tmp_path, location="/zone-b/ud2"))
    assert moved.network_location == "/zone-b/ud2"
    assert Cookie.from_bytes((await store.get(paths.cookie_path(cfg.bookie_id)))[0], "m").network_location == "/zone-b/ud2"
    await store.close()


async def test_wiped_or_wrong_data_dir_is_refused_with_the_reason(tmp_path):
    store = await open_store(f"memory://{uuid.uuid4().hex}")
    await check_and_write_cookie(store, config(tmp_path))
    with pytest.raises(CookieMismatchError, match="has no cookie but the metadata store holds one.*wiped"):
        await check_and_write_cookie(store, config(tmp_path, data="fresh"))
    await store.close()
