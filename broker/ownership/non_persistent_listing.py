"""Which non-persistent topics a namespace has, across the cluster: for discovery (GET_TOPICS_OF_NAMESPACE, and so
regex subscriptions) and the admin list.

How it works (Pulsar's getListOfNonPersistentTopics): a non-persistent topic is on record nowhere but in the
memory of the broker serving it, so the list is gathered from the owner of each of the namespace's bundles: this
broker's own topics, plus ``GET /admin/v2/non-persistent/{tenant}/{ns}/{bundle}`` (Pulsar's getListInBundle) on
each other broker that owns a bundle, with this broker's own credentials (``brokerClientAuthentication*``; that
role should be a superuser). A bundle nobody owns has no topics. The partitions of a partitioned non-persistent
topic are on record (its partition count), so they are listed whether or not they are loaded. A peer that fails
to answer fails the listing (ServiceNotReadyError): a partial list would make a regex consumer drop topics.
"""

from __future__ import annotations

import json
import ssl

import aiohttp

from broker.errors import ServiceNotReadyError
from broker.ownership.bundles import bundle_name, topic_hash
from magnetar.topic_name import NamespaceName

PEER_TIMEOUT_S = 10
MAX_PEER_ANSWER_BYTES = 64 * 1024 * 1024  # a peer's list of topic names; far beyond any namespace's


def local_topics_in_bundle(service, ns: NamespaceName, bundle) -> list[str]:
    """This broker's loaded non-persistent topics of ``ns`` whose names hash into ``bundle``."""
    lo, hi = bundle
    return sorted(key for key, topic in list(service.non_persistent.items())
                  if not topic.closed and topic.name.namespace_name == ns and lo <= topic_hash(topic.name) < hi)


async def topics_of_namespace(service, ns: NamespaceName) -> list[str]:
    """Every non-persistent topic of ``ns`` served anywhere in the cluster, and the partitions of its partitioned
    non-persistent topics. Raises ServiceNotReadyError when a bundle's owner cannot be asked."""
    names = set(service.non_persistent_topics_of(ns))
    for parent in await service.resources.partitioned_topics(ns, "non-persistent"):
        names.update(str(parent.partition(i)) for i in range(await service.resources.partition_count(parent)))
    me = service.ownership.me.broker_id
    bundles = await service.ownership.namespace_bundles(ns, fresh=True)
    for bundle in bundles.ranges():
        owner = await service.ownership.owner_at(service.ownership.bundle_path(ns, bundle))
        if owner is not None and owner.broker_id != me:
            names.update(await _ask_peer(service, owner, ns, bundle_name(bundle)))
    return sorted(names)


def broker_client_headers(config) -> dict[str, str]:
    """This broker's own credentials for another broker's REST (brokerClientAuthentication*), as headers."""
    if not config.broker_client_authentication_plugin:
        return {}
    from broker.admin_cli.settings import authentication, authorization_header  # one parser of Pulsar's plugins

    header = authorization_header(authentication(config.broker_client_authentication_plugin,
                                                 config.broker_client_authentication_parameters))
    return {"Authorization": header} if header else {}


async def _ask_peer(service, owner, ns: NamespaceName, bundle: str) -> list[str]:
    config = service.config
    base = owner.web_url(secure=False)  # https only when the peer serves nothing else
    url = f"{base}/admin/v2/non-persistent/{ns.tenant}/{ns.namespace}/{bundle}"
    tls = {"ssl": ssl.create_default_context(cafile=config.tls_trust_certs_file_path)} \
        if base.startswith("https:") else {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PEER_TIMEOUT_S)) as http:
            async with http.get(url, headers=broker_client_headers(config), allow_redirects=False, **tls) as resp:
                body = await resp.content.read(MAX_PEER_ANSWER_BYTES + 1)
                if resp.status != 200:
                    raise ServiceNotReadyError(f"broker {owner.broker_id} answered {resp.status} when asked for the "
                                               f"non-persistent topics of {ns} bundle {bundle}: {body[:300]!r}")
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise ServiceNotReadyError(f"broker {owner.broker_id} could not be asked for the non-persistent topics of "
                                   f"{ns} bundle {bundle}: {exc}") from exc
    if len(body) > MAX_PEER_ANSWER_BYTES:
        raise ServiceNotReadyError(f"broker {owner.broker_id} answered more than {MAX_PEER_ANSWER_BYTES} bytes")
    try:
        names = json.loads(body)
    except ValueError as exc:
        raise ServiceNotReadyError(f"broker {owner.broker_id} answered something that is not JSON") from exc
    if not isinstance(names, list) or not all(isinstance(n, str) and n.startswith("non-persistent://") for n in names):
        raise ServiceNotReadyError(f"broker {owner.broker_id} answered something that is not a list of topics")
    return names
