"""The admin REST client under `magnetar-admin`: one blocking request at a time, Pulsar's redirects followed.

A broker answers a bundle or topic operation it does not own with 307 and the owner's URL (Pulsar does the
same); the request is sent again there with the same method, body and credentials, at most
``MAX_REDIRECTS`` times. Any status of 400 or more becomes an AdminRequestError carrying the server's
``reason`` (the JSON body every Magnetar and Pulsar admin error has), which the CLI prints on stderr.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from dataclasses import dataclass

from broker.admin_cli.settings import AdminCliError, AdminSettings, authentication, authorization_header, ssl_context

MAX_REDIRECTS = 5
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a stats document of a topic with many subscriptions stays far below


class AdminRequestError(AdminCliError):
    """The broker refused or failed the request: its HTTP status and reason."""

    def __init__(self, status: int, reason: str, method: str, path: str):
        super().__init__(reason)
        self.status, self.reason, self.method, self.path = status, reason, method, path

    def __str__(self) -> str:
        phrase = http.client.responses.get(self.status, "")
        return f"{self.reason}\n\nReason: HTTP {self.status} {phrase} ({self.method} {self.path})"


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise AdminCliError(f"the broker answered with a body that is not JSON: {self.body[:200]!r}") from exc


def _reason(body: bytes, status: int) -> str:
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and isinstance(doc.get("reason"), str):
            return doc["reason"]
    except ValueError:
        pass
    text = body.decode(errors="replace").strip()
    return text[:2000] if text else http.client.responses.get(status, f"HTTP {status}")


class AdminClient:
    """Requests to ``settings.admin_url`` with the settings' credentials and TLS."""

    def __init__(self, settings: AdminSettings):
        self.settings = settings
        method = authentication(settings.auth_plugin, settings.auth_params)
        self._headers = {"Accept": "application/json"}
        header = authorization_header(method)
        if header is not None:
            self._headers["Authorization"] = header
        self._ssl = ssl_context(settings, method)

    def request(self, method: str, path: str, body=None, *, query: dict | None = None) -> Response:
        """Send one request (``body`` sent as JSON when not None). Raises AdminRequestError for status >= 400,
        AdminCliError when the broker cannot be reached."""
        url = self.settings.admin_url + path
        params = {k: str(v).lower() if isinstance(v, bool) else v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        for _ in range(MAX_REDIRECTS + 1):
            response = self._send(method, url, data, headers)
            if response.status in (307, 308) and "location" in response.headers:
                url = urllib.parse.urljoin(url, response.headers["location"])
                continue
            if response.status >= 400 or response.status in (307, 308):
                raise AdminRequestError(response.status, _reason(response.body, response.status), method, path)
            return response
        raise AdminCliError(f"{method} {path}: more than {MAX_REDIRECTS} redirects")

    def _send(self, method: str, url: str, data: bytes | None, headers: dict) -> Response:
        parts = urllib.parse.urlsplit(url)
        timeout = self.settings.request_timeout_s
        if parts.scheme == "https":
            context = self._ssl if self._ssl is not None else ssl_context(
                AdminSettings(admin_url=url, tls_trust_cert_path=self.settings.tls_trust_cert_path,
                              tls_allow_insecure=self.settings.tls_allow_insecure), None)
            conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout, context=context)
        elif parts.scheme == "http":
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        else:
            raise AdminCliError(f"cannot follow a redirect to {url[:200]!r}")
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request(method, target, body=data, headers=headers)
            resp = conn.getresponse()
            body = resp.read(MAX_RESPONSE_BYTES + 1)
            if len(body) > MAX_RESPONSE_BYTES:
                raise AdminCliError(f"{method} {parts.path}: the answer is over {MAX_RESPONSE_BYTES} bytes")
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, body)
        except ssl.SSLError as exc:
            raise AdminCliError(f"TLS handshake with {parts.netloc} failed: {exc}") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise AdminCliError(f"cannot reach the broker at {parts.scheme}://{parts.netloc}: {exc}") from exc
        finally:
            conn.close()

    # One word per verb keeps the command modules to one line per route.
    def get(self, path: str, **query):
        return self.request("GET", path, query=query).json()

    def put(self, path: str, body=None, **query) -> None:
        self.request("PUT", path, body, query=query)

    def post(self, path: str, body=None, **query) -> None:
        self.request("POST", path, body, query=query)

    def delete(self, path: str, **query) -> None:
        self.request("DELETE", path, query=query)
