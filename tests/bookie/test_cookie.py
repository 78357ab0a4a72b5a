"""Cookie rules as a table, and real start refusals of a whole bookie on a wiped, wrong or foreign data dir."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from dataclasses import replace

import pytest

from storage.bookie.cookie import COOKIE_FILE, Cookie, Decision, check_and_write_cookie, decide
from storage.bookie.process import BookieService
from storage.errors import CookieMismatchError
from storage.metadata import open_store, paths
from tests.bookie.support import config_for

GOOD = Cookie("inst", "127.0.0.1:3181", "/d/journal", "/d/ledgers", "/zone-a/ud1")
OTHER_DIRS = replace(GOOD, ledger_dir="/elsewhere/ledgers", journal_dir="/elsewhere/journal")
MOVED = replace(GOOD, network_location="/zone-b/ud1")


@pytest.mark.parametrize(
    "journal, ledger, metadata, expected, outcome",
    [
        # fresh dirs, no cookie anywhere: stamp everything
        (None, None, None, GOOD, Decision.WRITE_NEW),
        # everything agrees
        (GOOD, GOOD, GOOD, GOOD, Decision.OK),
        # only the network location changed: allowed, rewritten everywhere
        (GOOD, GOOD, GOOD, MOVED, Decision.UPDATE_NETWORK_LOCATION),
        # an update interrupted between the journal dir and the ledger dir: finish it
        (MOVED, GOOD, GOOD, MOVED, Decision.UPDATE_NETWORK_LOCATION),
        # a first start interrupted before the metadata write (dirs are stamped first): finish it
        (GOOD, None, None, GOOD, Decision.WRITE_NEW),
        (GOOD, GOOD, None, GOOD, Decision.WRITE_NEW),
        # wiped dirs / wrong --data-dir
        (None, None, GOOD, GOOD, "journal dir /d/journal has no cookie but the metadata store has one for this "
                                 "bookie (instance inst) written for journal dir /d/journal and ledger dir /d/ledgers: "
                                 "the data dir was wiped"),
        (GOOD, None, GOOD, GOOD, "ledger dir /d/ledgers has no cookie but the metadata store has one"),
        # dirs from another cluster (or a re-created metadata store): the instance id tells
        (GOOD, GOOD, None, replace(GOOD, instance_id="new"),
         "journal dir /d/journal holds a cookie (instance_id is 'inst', expected 'new') but the metadata store has "
         "none for this bookie"),
        (GOOD, GOOD, replace(GOOD, instance_id="new"), replace(GOOD, instance_id="new"),
         "the dir cookies and the metadata store's cookie differ: instance_id is 'inst', expected 'new'"),
        # the two dirs come from different bookies
        (GOOD, replace(GOOD, bookie_id="other:1"), GOOD, GOOD,
         "journal and ledger dir cookies disagree (bookie_id is '127.0.0.1:3181', expected 'other:1')"),
        # the dirs moved: configuration names other dirs than the cookie
        (OTHER_DIRS, OTHER_DIRS, OTHER_DIRS, GOOD,
         "journal_dir is '/elsewhere/journal', expected '/d/journal'; ledger_dir is '/elsewhere/ledgers', "
         "expected '/d/ledgers'"),
        # same dirs, another bookie id (port changed)
        (GOOD, GOOD, GOOD, replace(GOOD, bookie_id="127.0.0.1:9999"), "bookie_id is '127.0.0.1:3181', expected "
                                                                      "'127.0.0.1:9999'"),
    ],
)
def test_decision_table(journal, ledger, metadata, expected, outcome):
    if isinstance(outcome, Decision):
        assert decide(journal, ledger, metadata, expected) is outcome
    else:
        with pytest.raises(CookieMismatchError, match=re.escape(outcome)):
            decide(journal, ledger, metadata, expected)


@pytest.fixture
async def store():
    s = await open_store(f"memory://{uuid.uuid4().hex}")
    yield s
    await s.close()


async def test_first_start_writes_cookies_and_restart_accepts_them(tmp_path, store):
    cfg = config_for(tmp_path)
    written = await check_and_write_cookie(store, cfg)
    for d in (cfg.journal_dir, cfg.ledger_dir):
        assert Cookie.from_bytes((d / COOKIE_FILE).read_bytes(), str(d)) == written
    data, _ = await store.get(paths.cookie_path(cfg.bookie_id))
    assert Cookie.from_bytes(data, "metadata") == written
    assert json.loads(data)["journal_dir"] == str(cfg.journal_dir.resolve())
    assert written.instance_id == (await store.get(paths.INSTANCE_ID))[0].decode()
    assert await check_and_write_cookie(store, cfg) == written


async def test_network_location_change_is_accepted_and_rewritten(tmp_path, store):
    cfg = config_for(tmp_path)
    await check_and_write_cookie(store, cfg)
    moved_cfg = config_for(tmp_path, port=cfg.port, network_location="/zone-b/ud2")
    moved = await check_and_write_cookie(store, moved_cfg)
    assert moved.network_location == "/zone-b/ud2"
    data, stat = await store.get(paths.cookie_path(cfg.bookie_id))
    assert Cookie.from_bytes(data, "m").network_location == "/zone-b/ud2" and stat.version == 1  # conditional set
    assert Cookie.from_bytes((cfg.ledger_dir / COOKIE_FILE).read_bytes(), "dir").network_location == "/zone-b/ud2"


async def test_interrupted_first_start_is_finished(tmp_path, store):
    cfg = config_for(tmp_path)
    written = await check_and_write_cookie(store, cfg)
    await store.delete(paths.cookie_path(cfg.bookie_id))  # as if the process died before the metadata write
    assert await check_and_write_cookie(store, cfg) == written
    assert await store.exists(paths.cookie_path(cfg.bookie_id)) is not None


async def test_first_bookie_creates_the_instance_id_and_others_share_it(tmp_path, store):
    assert await store.exists(paths.INSTANCE_ID) is None
    one = await check_and_write_cookie(store, config_for(tmp_path, "one"))
    two = await check_and_write_cookie(store, config_for(tmp_path, "two"))
    assert one.instance_id == two.instance_id == (await store.get(paths.INSTANCE_ID))[0].decode()


async def start_stop(config, store) -> None:
    service = await BookieService.start(config, store=store)
    await service.stop()


async def refused(config, store) -> str:
    with pytest.raises(CookieMismatchError) as info:
        await BookieService.start(config, store=store)
    # A refused start leaves nothing behind: no registration, dirs unlocked.
    assert await store.exists(paths.available_path(config.bookie_id)) is None
    return str(info.value)


async def test_bookie_refuses_a_wiped_data_dir(tmp_path, store):
    config = config_for(tmp_path)
    await start_stop(config, store)
    shutil.rmtree(config.data_dir)
    message = await refused(config, store)
    assert f"bookie {config.bookie_id}: journal dir {config.journal_dir.resolve()} has no cookie but the metadata " \
           f"store has one" in message
    assert "the data dir was wiped or --data-dir points at the wrong place" in message
    assert not config.data_dir.exists() or not (config.journal_dir / COOKIE_FILE).exists()


async def test_bookie_refuses_a_different_ledger_dir(tmp_path, store):
    config = config_for(tmp_path)
    await start_stop(config, store)
    moved = config_for(tmp_path, port=config.port, http_port=config.http_port, ledger_dir=str(tmp_path / "new-ledgers"))
    message = await refused(moved, store)
    assert f"ledger dir {(tmp_path / 'new-ledgers').resolve()} has no cookie" in message
    assert f"written for journal dir {config.journal_dir.resolve()} and ledger dir {config.ledger_dir.resolve()}" \
           in message
    await start_stop(config, store)  # the original dirs still start: the refusal changed nothing


async def test_bookie_refuses_another_bookies_dirs(tmp_path, store):
    """Start bookie A on bookie B's data dir (same dirs, other port = other bookie id)."""
    a = config_for(tmp_path, "a")
    b = config_for(tmp_path, "b")
    await start_stop(a, store)
    await start_stop(b, store)
    a_on_b = config_for(tmp_path, "b", port=a.port, http_port=a.http_port)
    message = await refused(a_on_b, store)
    assert f"bookie_id is '{b.bookie_id}', expected '{a.bookie_id}'" in message


async def test_bookie_refuses_dirs_of_another_cluster(tmp_path, store):
    config = config_for(tmp_path)
    await start_stop(config, store)
    other_cluster = await open_store(f"memory://{uuid.uuid4().hex}")
    try:
        message = await refused(config, other_cluster)
        assert "holds a cookie (instance_id is" in message and "the metadata store has none" in message
    finally:
        await other_cluster.close()
