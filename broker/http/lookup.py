"""The body of an HTTP topic lookup (``/lookup/v2/topic/...``): Pulsar's LookupData for the owner's addresses."""

from __future__ import annotations

import urllib.parse

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
