"""Automatic load management: the owner splits its hot bundles, the leader sheds load from overloaded brokers.

How it works. Every broker samples its topics' counters into per-bundle
stats with its load report (broker/service.py, ``BundleStatsSampler``) and
publishes them in ``/loadbalance/brokers/<id>`` as ``lastStats``. Two loops
run on every broker, each a thin shell around a pure decision:

* **Split** (``load_balancer_split_interval_s``): the broker splits the
  bundles it owns that ``auto_split.bundles_to_split`` picks, through the
  same ``BrokerService.split_bundle`` as the admin REST (halves owned before
  the boundaries change, then, with ``load_balancer_auto_unload_split_bundles_enabled``,
  both halves unloaded gracefully so lookups place them afresh). Unlike Pulsar,
  where the leader asks each owner to split, the owner decides from its own
  stats: no RPC, and the decision uses numbers no older than one report.
* **Shedding** (``load_balancer_shedding_interval_s``): one broker is the
  leader — the one whose metadata session holds the ephemeral node
  ``/loadbalance/leader`` (Pulsar's path). Every round each broker tries to
  create it; whoever holds it reads every load report, asks
  ``load_shedding.plan_shedding`` what to move, and unloads each chosen
  bundle on its owner through the owner's admin ``PUT .../{bundle}/unload``
  (the graceful unload: topics close, then the ownership node goes; the new
  owner fences the ledgers). A leader that dies loses the node with its
  session, and another broker takes over within one round; the hit counts
  and the grace-period memory are the leader's and start empty on a new leader.

Neither loop ever moves a bundle by any other path than split and unload, so
the single-owner guarantees of broker/ownership/ownership.py hold unchanged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from typing import Callable

import aiohttp

from broker.errors import BrokerError
from broker.loadbalance.auto_split import bundles_to_split
from broker.loadbalance.load_shedding import plan_shedding
from broker.ownership.bundles import parse_bundle_name
from broker.ownership.ownership import NAMESPACE_ROOT, BrokerInfo
from broker.topics.names import parse_namespace
from storage.errors import MetadataError, NodeExistsError, NoNodeError, StorageError

log = logging.getLogger(__name__)

LEADER_PATH = "/loadbalance/leader"
UNLOAD_TIMEOUT_S = 60.0
_ROUND_ERRORS = (BrokerError, MetadataError, StorageError, aiohttp.ClientError, OSError, asyncio.TimeoutError)


class LeaderElection:
    """Leadership is holding the ephemeral ``/loadbalance/leader`` node: exactly one create succeeds, and the node
    goes with its creator's session (closed, or expired after a crash or partition)."""

    def __init__(self, store, me: BrokerInfo):
        self.store = store
        self.me = me

    async def is_leader(self) -> bool:
        """Whether this broker leads now, taking the lead when nobody holds it."""
        try:
            await self.store.create(LEADER_PATH, json.dumps(self.me.to_json()).encode(), ephemeral=True,
                                    make_parents=True)
            log.info("broker %s is now the load-balancer leader", self.me.broker_id)
            return True
        except NodeExistsError:
            pass
        try:
            _, stat = await self.store.get(LEADER_PATH)
        except NoNodeError:
            return False  # the leader just left: the next round may take it
        return stat.ephemeral_owner == self.store.session_id

    async def leader(self) -> BrokerInfo | None:
        try:
            data, _ = await self.store.get(LEADER_PATH)
        except NoNodeError:
            return None
        return BrokerInfo.from_json(json.loads(data))

    async def resign(self) -> None:
        """Give the lead up now (graceful shutdown) rather than when the session closes."""
        try:
            _, stat = await self.store.get(LEADER_PATH)
            if stat.ephemeral_owner == self.store.session_id:
                await self.store.delete(LEADER_PATH, stat.version)
        except MetadataError:
            pass  # not ours, gone, or the session is: either way we do not lead


class LoadManager:
    def __init__(self, service, clock: Callable[[], float] = time.monotonic):
        self.service = service
        self.config = service.config
        self.election = LeaderElection(service.store, service.ownership.me)
        self._clock = clock
        self._hits: dict[str, int] = {}
        self._unloaded_at: dict[str, float] = {}  # bundle key -> when this leader unloaded it

    def start(self) -> None:
        self.service.spawn(self._every(self.config.load_balancer_split_interval_s,
                                       self.config.load_balancer_auto_bundle_split_enabled, self.split_hot_bundles))
        self.service.spawn(self._every(self.config.load_balancer_shedding_interval_s,
                                       self.config.load_balancer_shedding_enabled, self.shed_load))

    async def _every(self, interval_s: float, enabled: bool, round_) -> None:
        if not enabled:
            return
        while True:  # a first round at once: it elects the leader (there is nothing to split or shed yet)
            try:
                await round_()
            except _ROUND_ERRORS as exc:
                log.warning("load balancer: %s failed: %s", round_.__name__, exc)
            await asyncio.sleep(interval_s)  # a period, not synchronisation

    # ---- split ---------------------------------------------------------------------------

    async def split_hot_bundles(self) -> list[str]:
        """One round: split the owned bundles over a threshold; returns the bundle keys split."""
        ownership = self.service.ownership
        if not ownership.writable:
            return []
        stats = {key: s for key, s in self.service.bundle_stats.items() if f"{NAMESPACE_ROOT}/{key}" in ownership.owned}
        counts = {}
        for key in stats:
            ns = key.rsplit("/", 1)[0]
            if ns not in counts:
                counts[ns] = len(await ownership.namespace_bundles(parse_namespace(ns), fresh=True))
        done = []
        for key in bundles_to_split(stats, counts, self.config.split_thresholds()):
            ns, name = key.rsplit("/", 1)
            try:
                halves = await self.service.split_bundle(
                    parse_namespace(ns), parse_bundle_name(name),
                    self.config.load_balancer_auto_unload_split_bundles_enabled)
            except BrokerError as exc:  # e.g. unloaded meanwhile, too small, boundaries kept changing
                log.warning("automatic split of bundle %s skipped: %s", key, exc)
                continue
            log.info("automatic split of bundle %s (%s) into %s", key, stats[key], halves)
            done.append(key)
        return done

    # ---- shedding --------------------------------------------------------------------------

    async def shed_load(self) -> list[tuple[str, str]]:
        """One round: when leader, unload what ``plan_shedding`` picks; returns the (broker, bundle) unloaded."""
        if not await self.election.is_leader():
            self._hits.clear()
            return []
        brokers = {info.broker_id: (info, report) for info, report in await self.service.ownership.live_brokers()}
        now = self._clock()
        policy = self.config.shedding_policy()
        self._unloaded_at = {b: t for b, t in self._unloaded_at.items() if now - t < policy.grace_period_s}
        plan = plan_shedding({b: r for b, (_, r) in brokers.items()}, self._hits, self._unloaded_at, now, policy)
        self._hits = dict(plan.hits)
        done = []
        for broker_id, bundle in plan.unloads:
            try:
                await self._unload(brokers[broker_id][0], bundle)
            except _ROUND_ERRORS as exc:
                log.warning("load shedding: unloading %s from %s failed: %s", bundle, broker_id, exc)
                continue
            log.info("load shedding: unloaded bundle %s from broker %s", bundle, broker_id)
            self._unloaded_at[bundle] = now
            done.append((broker_id, bundle))
        return done

    async def _unload(self, broker: BrokerInfo, bundle: str) -> None:
        """Graceful unload of ``bundle`` on its owner ``broker``: locally, or through its admin REST. A bundle that
        moved meanwhile is left where it is (the redirect is not followed)."""
        if broker.broker_id == self.service.ownership.me.broker_id:
            await self.service.unload_bundle(f"{NAMESPACE_ROOT}/{bundle}")
            return
        base = broker.web_url(secure=False)  # https when the owner serves only that, trusting the cluster's CA
        url = f"{base}/admin/v2/namespaces/{bundle}/unload"
        tls = {"ssl": ssl.create_default_context(cafile=self.config.tls_trust_certs_file_path)} \
            if base.startswith("https:") else {}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=UNLOAD_TIMEOUT_S)) as http:
            async with http.put(url, allow_redirects=False, **tls) as resp:
                if resp.status != 204:
                    raise BrokerError(f"PUT {url} answered {resp.status}: {await resp.text()}")
