"""Operator actions on autorecovery: recover a bookie now, decommission a live one (used by `bookie shell`).

Both mark every ledger with a fragment on the bookie as under-replicated,
naming it in the mark's ``replace`` list (so the workers move its fragments
even while it is alive), then wait until no ledger names it. New ledgers
may still land on it until it stops taking writes, so the wait re-marks
any it finds. Decommissioning first switches the bookie read-only through
its HTTP API: placement then skips it and writers move off it on their
next add (a read-only bookie refuses normal adds).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Callable

from storage.autorecovery import checker
from storage.autorecovery.underreplication import Mark, UnderReplication
from storage.client.client import LedgerClient
from storage.errors import NoSuchLedgerError, ReplicationError

log = logging.getLogger(__name__)


async def ledgers_on(client: LedgerClient, bookie_id: str) -> list[int]:
    out = []
    for lid in await client.list_ledgers():
        try:
            md, _ = await client.get_metadata(lid)
        except NoSuchLedgerError:
            continue
        if bookie_id in checker.bookies_of(md):
            out.append(lid)
    return out


async def mark_bookie(client: LedgerClient, bookie_id: str) -> list[int]:
    """Mark every ledger with a fragment on ``bookie_id``; returns their ids."""
    marks = UnderReplication(client.context.store)
    held = await ledgers_on(client, bookie_id)
    for lid in held:
        await marks.mark(lid, Mark(replace=frozenset({bookie_id})))
    return held


async def set_read_only(client: LedgerClient, bookie_id: str, admin_token: str | None = None) -> None:
    """Switch a registered bookie read-only through its HTTP API, with the bookie's
    ``http_admin_token`` when it has one. Raises ReplicationError."""
    from aiohttp import ClientError, ClientSession, ClientTimeout

    await client.registry.refresh()
    info = client.registry.get(bookie_id)
    if info is None:
        raise ReplicationError(f"bookie {bookie_id} is not registered; use `recover` for a bookie that is gone")
    if not info.http_address:
        raise ReplicationError(f"bookie {bookie_id} registered no HTTP address; cannot make it read-only")
    url = f"http://{info.http_address}/api/v1/bookie/state/readonly"
    try:
        async with ClientSession(timeout=ClientTimeout(total=10)) as session:
            headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
            async with session.put(url, data=json.dumps({"readOnly": True}), headers=headers) as resp:
                if resp.status != 200:
                    raise ReplicationError(f"bookie {bookie_id} refused read-only mode: HTTP {resp.status} "
                                           f"{await resp.text()}")
    except (ClientError, asyncio.TimeoutError, OSError) as exc:
        raise ReplicationError(f"cannot reach bookie {bookie_id} at {url}: {exc}") from exc
    await client.registry.wait_for(lambda r: r.get(bookie_id) is None or not r.get(bookie_id).writable, 10)


async def wait_until_moved(client: LedgerClient, bookie_id: str, timeout_s: float,
                           progress: Callable[[str], None], poll_s: float = 1.0) -> bool:
    """Until no ledger names ``bookie_id`` (re-marking stragglers) and the marks made for it are resolved.

    False at the timeout.
    """
    marks = UnderReplication(client.context.store)
    deadline = time.monotonic() + timeout_s
    last = None
    ours: set[int] = set()
    while True:
        left = await mark_bookie(client, bookie_id)
        ours |= set(left)
        if not left and not ours & set(await marks.list()):
            return True
        if len(left) != last:
            progress(f"{len(left)} ledgers still have fragments on {bookie_id}")
            last = len(left)
        if time.monotonic() >= deadline:
            progress(f"timed out after {timeout_s:g}s; still on {bookie_id}: {' '.join(map(str, left[:20]))}")
            return False
        await asyncio.sleep(poll_s)  # the progress poll period
