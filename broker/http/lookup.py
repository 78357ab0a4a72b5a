"""An HTTP topic lookup (``/lookup/v2/topic/...``): Pulsar's LookupData for the owner's addresses.

An unowned bundle goes to the broker placement chooses, asked with ``authoritative=true``, which takes it. Pulsar
redirects the client there (307), and so does Magnetar for a caller without an ``Authorization`` header. A
caller with one is answered here, from the chosen broker's own answer to the same request with the same header:
the official clients follow a redirect with libcurl, which drops ``Authorization`` on the way to another host or
port, so a token or basic caller redirected to another broker (or another worker of ``broker standalone``)
arrived there anonymous and was refused (403). A TLS client certificate goes with the client on a redirect, and
cannot be passed on by this broker, so those callers are still redirected.
"""

from __future__ import annotations

import urllib.parse

from aiohttp import web

from broker.http.forwarding import forward
from broker.ownership.ownership import BrokerInfo


def lookup_answer(broker: BrokerInfo, listener_name: str | None) -> dict:
    """Pulsar's LookupData for ``broker``, under the advertised listener the client named (``listenerName``
    parameter or ``X-Pulsar-ListenerName`` header), else its default URLs. Raises ServiceNotReadyError for a
    listener the broker does not have."""
    url, url_tls = broker.lookup_urls(listener_name)
    http_url, https_url = broker.web_service_url, broker.web_service_url_tls
    for listener in broker.listeners:
        if listener.name == listener_name:
            http_url, https_url = listener.web_service_url or http_url, listener.web_service_url_tls or https_url
    return {"brokerUrl": url or "", "brokerUrlTls": url_tls or "", "httpUrl": http_url or "",
            "httpUrlTls": https_url or "", "nativeUrl": url or ""}


def lookup_redirect(broker: BrokerInfo, path: str, listener_name: str | None, secure: bool = False) -> str:
    """Where an unowned bundle's lookup is sent (307): the chosen broker, asked authoritatively, with the client's
    listener name kept so the answer is still under it; over https when the client came over https."""
    query = {"authoritative": "true"}
    if listener_name:
        query["listenerName"] = listener_name
    return f"{broker.web_url(secure)}{path}?{urllib.parse.urlencode(query)}"


async def answer_lookup(request: web.Request, service, topic) -> web.Response:
    """The lookup route's answer for ``topic`` (persistent or not): this broker's own, a 307 to the chosen broker,
    or, for a caller with an ``Authorization`` header, the chosen broker's answer relayed (see the module)."""
    authoritative = request.query.get("authoritative", "false").lower() == "true"
    broker, owns = await service.lookup(topic, authoritative)
    listener = request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName")
    if owns:
        return web.json_response(lookup_answer(broker, listener))
    url = lookup_redirect(broker, request.path, listener, request.secure)
    if "Authorization" not in request.headers:
        raise web.HTTPTemporaryRedirect(url)
    return await forward(request, url, broker.broker_id)

