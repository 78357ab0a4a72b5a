"""Admin requests for a topic another broker serves are answered by that broker (and, from a browser, those for a
bundle another broker owns).

Pulsar redirects such a request (307) to the owner. Clients do not all follow: Python's urllib (and so the
official client suite's own helpers) follows a 307 only for GET and HEAD, and libcurl drops ``Authorization`` on
the way to another host or port. Behind ``broker standalone``'s one advertised address (several workers) that
made a PUT of a topic's compaction fail where Pulsar's one-broker standalone succeeds. So the broker that
received the request sends it on to the owner itself -- same method, path, query, body, and the caller's
``Authorization`` -- and answers with the owner's answer; the owner authorizes it again. A caller who proved
their role with a TLS client certificate (no ``Authorization`` header) cannot be vouched for by this broker, so
they get Pulsar's 307 instead.

A request that needs other brokers' parts (a partitioned topic's stats, one part per partition's broker) asks
each with ``ask_owner`` instead of being sent on whole.
"""

from __future__ import annotations

import json
import ssl

import aiohttp
from aiohttp import web

from broker.errors import ServedElsewhereError, ServiceNotReadyError
from broker.ownership.non_persistent_listing import broker_client_headers
from magnetar.topic_name import encode_local_name

FORWARD_TIMEOUT_S = 60  # a compaction or a clear-backlog answers once started, not when done
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # a topic's stats or internal stats with many subscriptions
_SENT_ON = ("authorization", "content-type", "accept")
FORWARDED = "X-Magnetar-Forwarded"  # set on a request sent on: the owner answers it, never sends it on again


@web.middleware
async def to_owner(request, handler):
    try:
        return await handler(request)
    except ServedElsewhereError as exc:
        if FORWARDED in request.headers:
            raise  # ownership moved while the request was on its way: 503, the caller retries
        url = f"{exc.owner.web_url(request.secure)}{request.path_qs}"
        if "Authorization" not in request.headers and _has_client_certificate(request):
            raise web.HTTPTemporaryRedirect(url) from None
        return await forward(request, url, exc.owner.broker_id)


def from_a_browser(request) -> bool:
    """Whether a browser's script made the request (only browsers send ``Sec-Fetch-Site``). A browser follows a
    307 to another broker's port only as a cross-origin request, which it refuses without CORS headers (and it
    would drop the token): such a request is sent on instead of redirected."""
    return "Sec-Fetch-Site" in request.headers


def _has_client_certificate(request) -> bool:
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
    return ssl_object is not None and ssl_object.getpeercert() is not None


async def forward(request, url: str, owner_id: str) -> web.Response:
    """``request`` sent on to ``url`` on broker ``owner_id``, with the caller's credentials; its answer."""
    status, answer, content_type, location = await _exchange(request, request.method, url, owner_id,
                                                             _caller_headers(request), await request.read())
    response = web.Response(status=status, body=answer, content_type=content_type if answer else None)
    if location is not None:
        response.headers["Location"] = location
    return response


def topic_path(name, action: str) -> str:
    """The admin route of one topic's ``action``: ``/admin/v2/<domain>/<tenant>/<ns>/<topic>[/<action>]``."""
    path = f"/admin/v2/{name.domain}/{name.tenant}/{name.namespace}/{encode_local_name(name.local_name)}"
    return f"{path}/{action}" if action else path


async def ask_owner(request, owner, method: str, path: str, body: bytes = b"") -> tuple[int, object]:
    """``method path`` on broker ``owner``, for one part of a request this broker has already authorized (a
    partition of a partitioned topic another broker serves, a bundle another broker owns): (its 2xx status, its
    JSON answer or None for none) or (its status, a reason naming that broker). The caller's ``Authorization``
    goes with it; a caller who proved their role otherwise (a TLS client certificate) is vouched for by this
    broker's own credentials (``brokerClientAuthentication*``), as Pulsar's broker asks with its own admin
    client. Raises ServiceNotReadyError when the owner cannot be asked."""
    headers = _caller_headers(request)
    if "Authorization" not in request.headers:
        headers.update(broker_client_headers(_config(request)))
    url = f"{owner.web_url(request.secure)}{path}"
    status, answer, _, _ = await _exchange(request, method, url, owner.broker_id, headers, body)
    try:
        doc = json.loads(answer) if answer else None
    except ValueError:
        doc = None
    if 200 <= status < 300 and (doc is not None or not answer):
        return status, doc
    reason = doc.get("reason") if isinstance(doc, dict) else None
    return (status if status >= 300 else 502), \
        f"{method} {path} on broker {owner.broker_id}: {reason or answer[:500].decode(errors='replace')}"


def _config(request):
    from broker.http.admin import SERVICE

    return request.app[SERVICE].config


def _caller_headers(request) -> dict[str, str]:
    headers = {k: v for k, v in request.headers.items() if k.lower() in _SENT_ON}
    headers[FORWARDED] = "1"
    return headers


async def _exchange(request, method: str, url: str, owner_id: str, headers: dict, body: bytes):
    """One request to another broker: (status, body, content type, Location)."""
    cafile = _config(request).tls_trust_certs_file_path
    tls = {"ssl": ssl.create_default_context(cafile=cafile)} if url.startswith("https:") else {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT_S)) as http:
            async with http.request(method, url, headers=headers, data=body or None, allow_redirects=False,
                                    **tls) as resp:
                answer = await resp.content.read(MAX_ANSWER_BYTES + 1)
                status, content_type = resp.status, resp.content_type
                location = resp.headers.get("Location")
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise ServiceNotReadyError(f"broker {owner_id} serves this topic and could not be asked: {exc}") from exc
    if len(answer) > MAX_ANSWER_BYTES:
        raise ServiceNotReadyError(f"broker {owner_id} answered more than {MAX_ANSWER_BYTES} bytes")
    return status, answer, content_type, location
