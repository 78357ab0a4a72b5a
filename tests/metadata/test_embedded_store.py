"""What only the embedded backend promises: shared trees by name, file:// durability, one process per directory."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from storage.errors import MetadataError
from storage.metadata import EventType, open_store

REPO = Path(__file__).resolve().parents[2]


def open_in_other_process(url: str) -> subprocess.CompletedProcess:
    """Try to open (and close) the store from a fresh interpreter."""
    probe = (
        "import asyncio\n"
        "from storage.metadata import open_store\n"
        "async def main():\n"
        f"    await (await open_store({url!r})).close()\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env, cwd=REPO)


# ---- memory:// and file:// alike ----------------------------------------------------


@pytest.fixture(params=["memory", "file"])
def embedded_url(request, tmp_path) -> str:
    return f"memory://{uuid.uuid4().hex}" if request.param == "memory" else f"file://{tmp_path / 'meta'}"


async def test_watch_callbacks_never_run_inside_the_mutating_call(embedded_url):
    async with await open_store(embedded_url) as store:
        seen = []
        fired = asyncio.Event()
        store.watch_data("/n", lambda e: (seen.append(e), fired.set()))
        await store.create("/n")
        assert seen == [], "delivered synchronously, from inside create()"
        await asyncio.wait_for(fired.wait(), 5)
        assert [e.type for e in seen] == [EventType.CREATED]


async def test_stores_opened_by_the_same_name_share_one_tree(embedded_url):
    async with await open_store(embedded_url) as a, await open_store(embedded_url) as b:
        await a.create("/shared", b"x")
        assert (await b.get("/shared"))[0] == b"x"
        assert a.session_id != b.session_id
    async with await open_store(f"memory://{uuid.uuid4().hex}") as other:
        assert await other.exists("/shared") is None


# ---- file:// ---------------------------------------------------------------------------


async def test_persistent_state_survives_reopen_and_ephemerals_do_not(tmp_path):
    url = f"file://{tmp_path}/meta"
    store = await open_store(url)
    await store.create("/keep/a", b"1", make_parents=True)
    await store.set("/keep/a", b"2")
    await store.set("/", b"root data")
    nested = [await store.create("/keep/seq-", sequential=True) for _ in range(2)]
    top = await store.create("/top-", sequential=True)
    await store.create("/keep/eph", b"", ephemeral=True)  # advances /keep's counter, but is not kept
    await store.delete(nested[0])
    await store.close()

    again = await open_store(url)
    data, stat = await again.get("/keep/a")
    assert (data, stat.version) == (b"2", 1)
    assert (await again.get("/"))[0] == b"root data"
    assert await again.exists("/keep/eph") is None
    assert await again.children("/keep") == ["a", "seq-0000000002"]
    # Sequence counters persist, at the root too: numbers are never handed out twice.
    assert await again.create("/keep/seq-", sequential=True) == "/keep/seq-0000000004"
    assert await again.create("/top-", sequential=True) == f"/top-{int(top[-10:]) + 1:010d}"
    await again.close()


async def test_a_second_process_is_refused_clearly_until_the_first_closes(tmp_path):
    url = f"file://{tmp_path}/meta"
    store = await open_store(url)
    refused = open_in_other_process(url)
    assert refused.returncode != 0
    assert "in use by another process" in refused.stderr
    assert f"pid {os.getpid()}" in refused.stderr
    await store.close()
    assert open_in_other_process(url).returncode == 0, "the lock must be released on close"


async def test_last_session_closing_releases_the_directory(tmp_path):
    url = f"file://{tmp_path}/meta"
    a, b = await open_store(url), await open_store(url)
    await a.create("/x", b"1")
    await a.close()
    assert open_in_other_process(url).returncode != 0, "b still holds the directory"
    await b.close()
    assert open_in_other_process(url).returncode == 0


async def test_unreadable_database_is_a_clear_error(tmp_path):
    meta = tmp_path / "meta"
    meta.mkdir()
    (meta / "metadata.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(MetadataError, match="metadata.sqlite"):
        await open_store(f"file://{meta}")
    (meta / "metadata.sqlite").unlink()
    async with await open_store(f"file://{meta}") as store:  # and the failed open left no lock behind
        await store.create("/ok")


async def test_bad_urls_are_clear_errors():
    with pytest.raises(ValueError, match="unknown metadata store scheme"):
        await open_store("etcd://x")
    with pytest.raises(ValueError, match="no scheme"):
        await open_store("/just/a/path")
    with pytest.raises(ValueError, match="needs a directory"):
        await open_store("file://")
