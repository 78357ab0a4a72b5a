"""The persisted embedded store (file://): durability across reopen, and one process at a time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from storage.errors import MetadataError
from storage.metadata import open_store


async def test_persistent_state_survives_reopen_and_ephemerals_do_not(tmp_path):
    url = f"file://{tmp_path}/meta"
    store = await open_store(url)
    await store.create("/keep/a", b"1", make_parents=True)
    await store.set("/keep/a", b"2")
    first = await store.create("/keep/seq-", sequential=True)
    await store.create("/keep/eph", b"", ephemeral=True)
    await store.close()

    again = await open_store(url)
    data, stat = await again.get("/keep/a")
    assert (data, stat.version) == (b"2", 1)
    assert await again.exists("/keep/eph") is None
    second = await again.create("/keep/seq-", sequential=True)
    assert int(second.rsplit("-", 1)[1]) > int(first.rsplit("-", 1)[1]), "sequence counters must persist"
    await again.close()


async def test_second_process_is_refused_clearly(tmp_path):
    url = f"file://{tmp_path}/meta"
    store = await open_store(url)
    probe = (
        "import asyncio, sys\n"
        "from storage.metadata import open_store\n"
        f"asyncio.run(open_store({url!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "in use by another process" in result.stderr
    await store.close()


async def test_two_sessions_in_one_process_share_the_tree(tmp_path):
    url = f"file://{tmp_path}/meta"
    a, b = await open_store(url), await open_store(url)
    await a.create("/shared", b"x")
    assert (await b.get("/shared"))[0] == b"x"
    await a.close()
    await b.close()


async def test_bad_url_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown metadata store scheme"):
        await open_store("etcd://x")
    with pytest.raises(ValueError, match="no scheme"):
        await open_store("/just/a/path")
    with pytest.raises(MetadataError):
        await (await open_store("memory://bad")).get("relative/path")
