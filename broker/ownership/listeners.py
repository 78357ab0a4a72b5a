"""Pulsar's advertised listeners: named addresses a broker is reachable at, and the lookup answer for each.

``advertisedListeners=internal:pulsar://10.0.0.5:6650,internal:pulsar+ssl://10.0.0.5:6651,external:pulsar://h:6650``
gives a broker several names for itself (inside a private network, through a NAT, ...). A client that sets
``listener_name`` is answered, on LOOKUP, with the owner's addresses under that name; a client that sets none gets
the internal listener's. Each listener has at most one ``pulsar://`` and one ``pulsar+ssl://`` address (and, as in
Pulsar, may add ``http://`` / ``https://``); no ``host:port`` belongs to two listeners; the internal listener is
``internalListenerName`` or, when unset, the first one named. Everything here is pure: parsing, validation and
the choice of the answer; the broker publishes the parsed listeners in its ownership registration (BrokerInfo),
so any broker can answer for the owner of a bundle.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Mapping

from broker.errors import ServiceNotReadyError

MAX_LISTENERS = 32  # an operator's list, but still a bound
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_SCHEME_FIELD = {"pulsar": "service_url", "pulsar+ssl": "service_url_tls", "http": "web_service_url",
                 "https": "web_service_url_tls"}


class ListenerConfigError(ValueError):
    """``advertisedListeners`` / ``internalListenerName`` is malformed; the message names the entry."""


@dataclass(frozen=True)
class AdvertisedListener:
    name: str
    service_url: str | None = None  # pulsar://
    service_url_tls: str | None = None  # pulsar+ssl://
    web_service_url: str | None = None  # http://
    web_service_url_tls: str | None = None  # https://

    def to_json(self) -> dict:
        """Pulsar's AdvertisedListener shape, as brokers publish it in their registration."""
        doc = {"brokerServiceUrl": self.service_url, "brokerServiceUrlTls": self.service_url_tls,
               "brokerHttpUrl": self.web_service_url, "brokerHttpsUrl": self.web_service_url_tls}
        return {k: v for k, v in doc.items() if v}

    @classmethod
    def from_json(cls, name: str, doc: dict) -> "AdvertisedListener":
        return cls(name, doc.get("brokerServiceUrl"), doc.get("brokerServiceUrlTls"), doc.get("brokerHttpUrl"),
                   doc.get("brokerHttpsUrl"))


def parse_listeners(text: str | None, *, plain_port: bool = True, tls_port: bool = False
                    ) -> tuple[AdvertisedListener, ...]:
    """Parse ``advertisedListeners``; ``()`` when unset. ``plain_port`` / ``tls_port`` say whether the broker serves
    ``pulsar://`` / ``pulsar+ssl://`` at all: advertising a protocol the broker does not serve is refused.
    Raises ListenerConfigError naming the offending entry."""
    if text is None or not text.strip():
        return ()
    urls: dict[str, dict[str, str]] = {}
    owner_of_address: dict[str, str] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, url = entry.partition(":")
        name, url = name.strip(), url.strip()
        if not sep or not name or url.startswith("//"):
            raise ListenerConfigError(f"advertisedListeners entry {entry!r} has no listener name (want name:scheme://host:port)")
        if not _NAME.match(name):
            raise ListenerConfigError(f"advertisedListeners: listener name {name!r} must be 1-64 letters, digits, '_', '.' or '-'")
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in _SCHEME_FIELD:
            raise ListenerConfigError(f"advertisedListeners entry {entry!r}: scheme must be pulsar, pulsar+ssl, http or https")
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None or parts.path not in ("", "/"):
            raise ListenerConfigError(f"advertisedListeners entry {entry!r}: want {scheme}://host:port")
        field = _SCHEME_FIELD[scheme]
        mine = urls.setdefault(name, {})
        if field in mine:
            raise ListenerConfigError(f"advertisedListeners: listener {name!r} has more than one {scheme}:// address")
        address = f"{parts.hostname}:{port}"
        other = owner_of_address.setdefault(address, name)
        if other != name:
            raise ListenerConfigError(f"advertisedListeners: {address} is given to both listener {other!r} and {name!r}")
        mine[field] = f"{scheme}://{address}"
        if len(urls) > MAX_LISTENERS:
            raise ListenerConfigError(f"advertisedListeners: more than {MAX_LISTENERS} listeners")
    out = []
    for name, fields_ in urls.items():
        listener = AdvertisedListener(name, **fields_)
        if listener.service_url is None and listener.service_url_tls is None:
            raise ListenerConfigError(f"advertisedListeners: listener {name!r} has neither a pulsar:// nor a pulsar+ssl:// address")
        if listener.service_url is not None and not plain_port:
            raise ListenerConfigError(f"advertisedListeners: listener {name!r} advertises pulsar:// but brokerServicePort is off")
        if listener.service_url_tls is not None and not tls_port:
            raise ListenerConfigError(f"advertisedListeners: listener {name!r} advertises pulsar+ssl:// but brokerServicePortTls is not set")
        out.append(listener)
    return tuple(out)


def internal_listener(listeners: tuple[AdvertisedListener, ...], internal_name: str | None) -> AdvertisedListener | None:
    """The listener brokers and name-less clients use: ``internal_name``, else the first. Raises ListenerConfigError
    when ``internal_name`` is not among ``listeners`` (or is set without any listener)."""
    if not listeners:
        if internal_name:
            raise ListenerConfigError(f"internalListenerName is {internal_name!r} but advertisedListeners is empty")
        return None
    if not internal_name:
        return listeners[0]
    for listener in listeners:
        if listener.name == internal_name:
            return listener
    raise ListenerConfigError(f"internalListenerName {internal_name!r} is not one of the advertisedListeners "
                              f"({', '.join(l.name for l in listeners)})")


def listener_urls(listeners: Mapping[str, AdvertisedListener], default: tuple[str | None, str | None],
                  listener_name: str | None, broker_id: str) -> tuple[str | None, str | None]:
    """(pulsar://, pulsar+ssl://) a lookup answers for a broker: under ``listener_name`` when the client named one,
    else ``default`` (the broker's own, i.e. its internal listener's, URLs). A name the broker does not have is
    refused with ServiceNotReadyError, as Pulsar answers it."""
    if not listener_name:
        return default
    listener = listeners.get(listener_name)
    if listener is None:
        known = ", ".join(sorted(listeners)) or "none"
        raise ServiceNotReadyError(f"broker {broker_id} has no advertised listener named {listener_name[:100]!r} "
                                   f"(its listeners: {known})")
    return listener.service_url, listener.service_url_tls
