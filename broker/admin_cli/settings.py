"""Where `magnetar-admin` connects and how it proves who it is: pulsar-admin's flags and client.conf keys.

pulsar-admin reads a client.conf (its launcher passes ``$PULSAR_CLIENT_CONF``, by default conf/client.conf)
for ``webServiceUrl`` (or the older ``serviceUrl``), ``authPlugin``, ``authParams``, ``tlsTrustCertsFilePath``,
``tlsAllowInsecureConnection`` and ``tlsEnableHostnameVerification``; a flag given on the command line wins
over the file. Magnetar reads the same keys from the file that ``PULSAR_CLIENT_CONF`` (or ``--client-conf``)
names. Everything here is pure: the file's text and the environment come in as arguments.

Authentication plugins are Pulsar's class names (the short name alone is accepted too) with their parameter
formats, turned into the client's own authentication objects (magnetar.auth), so one definition of each
method serves the binary protocol and HTTP:

* ``org.apache.pulsar.client.impl.auth.AuthenticationToken``: ``token:<jwt>``, ``file:///path/to/token`` or the
  bare token;
* ``org.apache.pulsar.client.impl.auth.AuthenticationBasic``: ``{"userId": "...", "password": "..."}``;
* ``org.apache.pulsar.client.impl.auth.AuthenticationTls``: ``tlsCertFile:/path,tlsKeyFile:/path`` (or the same
  keys as JSON); the identity is the client certificate presented in the TLS handshake, so it needs https.
"""

from __future__ import annotations

import base64
import json
import ssl
from dataclasses import dataclass
from pathlib import Path

from broker.errors import BrokerError
from broker.pulsar_conf import PulsarConfigError, parse_properties
from magnetar import auth
from magnetar.errors import InvalidConfiguration
from magnetar.tls import TlsOptions, client_context

DEFAULT_ADMIN_URL = "http://localhost:8080"
MAX_CONF_BYTES = 1024 * 1024  # a client.conf is a few KiB; anything this large is the wrong file
MAX_REQUEST_TIMEOUT_S = 3600
_PLUGIN_PREFIX = "org.apache.pulsar.client.impl.auth."


class AdminCliError(BrokerError):
    """`magnetar-admin` was given something it cannot use (flags, client.conf, credentials); nothing was sent."""


@dataclass(frozen=True)
class AdminSettings:
    admin_url: str = DEFAULT_ADMIN_URL
    auth_plugin: str | None = None
    auth_params: str | None = None
    tls_trust_cert_path: str | None = None
    tls_allow_insecure: bool = False
    tls_enable_hostname_verification: bool = False
    request_timeout_s: float = 60.0

    def validate(self) -> "AdminSettings":
        scheme = self.admin_url.split("://", 1)[0] if "://" in self.admin_url else ""
        if scheme not in ("http", "https"):
            raise AdminCliError(f"the admin URL must be http://host:port or https://host:port, got {self.admin_url!r}")
        if not 0 < self.request_timeout_s <= MAX_REQUEST_TIMEOUT_S:
            raise AdminCliError(f"--request-timeout must be in 1..{MAX_REQUEST_TIMEOUT_S} seconds, "
                                f"got {self.request_timeout_s}")
        if self.auth_params and not self.auth_plugin:
            raise AdminCliError("--auth-params needs --auth-plugin (or authPlugin in client.conf)")
        return self


def read_client_conf(path: str | Path) -> dict[str, str]:
    """The keys of a client.conf. Raises AdminCliError naming the file when it cannot be read or parsed."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_CONF_BYTES:
            raise AdminCliError(f"client configuration {path} is over {MAX_CONF_BYTES} bytes")
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise AdminCliError(f"cannot read client configuration {path}: {exc}") from exc
    try:
        return parse_properties(text, str(path))
    except PulsarConfigError as exc:
        raise AdminCliError(str(exc)) from exc


def _bool(key: str, value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise AdminCliError(f"client.conf {key} must be true or false, got {value!r}")
    return value.strip().lower() == "true"


def resolve(conf: dict[str, str], **flags) -> AdminSettings:
    """Settings from a client.conf's keys with the command line's flags over them (a flag left None defers
    to the file, then to the default)."""

    def pick(flag: str, *keys: str):
        if flags.get(flag) is not None:
            return flags[flag]
        for key in keys:
            if conf.get(key, "").strip():
                return conf[key].strip()
        return None

    insecure = flags.get("tls_allow_insecure")
    hostname = flags.get("tls_enable_hostname_verification")
    timeout = flags.get("request_timeout_s")
    return AdminSettings(
        admin_url=(pick("admin_url", "webServiceUrl", "serviceUrl") or DEFAULT_ADMIN_URL).rstrip("/"),
        auth_plugin=pick("auth_plugin", "authPlugin"),
        auth_params=pick("auth_params", "authParams"),
        tls_trust_cert_path=pick("tls_trust_cert_path", "tlsTrustCertsFilePath"),
        tls_allow_insecure=insecure if insecure is not None else
        _bool("tlsAllowInsecureConnection", conf.get("tlsAllowInsecureConnection", "false")),
        tls_enable_hostname_verification=hostname if hostname is not None else
        _bool("tlsEnableHostnameVerification", conf.get("tlsEnableHostnameVerification", "false")),
        request_timeout_s=timeout if timeout is not None else 60.0,
    ).validate()


# ---- authentication plugins --------------------------------------------------------------------------------


def _key_values(params: str) -> dict[str, str]:
    """Pulsar's two parameter encodings: a JSON object, or ``k1:v1,k2:v2`` (a value may contain ':')."""
    text = params.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise AdminCliError(f"--auth-params is not valid JSON: {exc}") from exc
        if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
            raise AdminCliError("--auth-params JSON must be an object of strings")
        return doc
    out = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition(":")
        if not sep:
            raise AdminCliError(f"--auth-params entry {item[:60]!r} is not key:value")
        out[key.strip()] = value.strip()
    return out


def _token(params: str) -> str:
    params = params.strip()
    if params.startswith("token:"):
        return params[len("token:"):]
    if params.startswith("file:"):
        path = params[len("file:"):]
        path = path[2:] if path.startswith("//") else path  # file:///abs/path and file:/abs/path alike
        try:
            data = Path(path).read_bytes()[: auth.MAX_AUTH_DATA_BYTES + 1]
        except OSError as exc:
            raise AdminCliError(f"cannot read the token file {path}: {exc}") from exc
        return data.decode(errors="replace").strip()
    if params.startswith("{"):
        token = _key_values(params).get("token")
        if token is None:
            raise AdminCliError('token --auth-params JSON needs a "token" key')
        return token
    return params


def _basic(params: str) -> auth.Authentication:
    values = _key_values(params)
    if "userId" not in values or "password" not in values:
        raise AdminCliError('basic --auth-params must be {"userId": "...", "password": "..."}')
    try:
        return auth.AuthenticationBasic(values["userId"], values["password"])
    except ValueError as exc:
        raise AdminCliError(f"basic --auth-params: {exc}") from exc


def _tls(params: str) -> auth.Authentication:
    values = _key_values(params)
    if "tlsCertFile" not in values or "tlsKeyFile" not in values:
        raise AdminCliError("tls --auth-params must be tlsCertFile:/path/cert.pem,tlsKeyFile:/path/key.pem")
    return auth.AuthenticationTLS(values["tlsCertFile"], values["tlsKeyFile"])


PLUGINS = {
    "AuthenticationToken": lambda params: auth.AuthenticationToken(_token(params)),
    "AuthenticationBasic": _basic,
    "AuthenticationTls": _tls,
}


def authentication(plugin: str | None, params: str | None) -> auth.Authentication | None:
    """The client authentication a Pulsar plugin class name and its parameters stand for (None: no plugin).
    Raises AdminCliError for an unknown plugin or malformed parameters."""
    if not plugin:
        return None
    short = plugin.strip().removeprefix(_PLUGIN_PREFIX)
    if short not in PLUGINS:
        raise AdminCliError(f"unsupported --auth-plugin {plugin[:200]!r}; supported: "
                            + ", ".join(_PLUGIN_PREFIX + name for name in PLUGINS))
    return PLUGINS[short](params or "")


def authorization_header(method: auth.Authentication | None) -> str | None:
    """The HTTP Authorization header for a token or basic method (None for none, and for TLS, whose
    identity travels in the handshake). Raises AdminCliError when the credential is unusable."""
    if method is None or method.client_certificate() is not None:
        return None
    try:
        data = method.auth_data()
    except InvalidConfiguration as exc:
        raise AdminCliError(str(exc)) from exc
    if method.method_name == "token":
        if not data:
            raise AdminCliError("the token is empty")
        return "Bearer " + data.decode()
    return "Basic " + base64.b64encode(data).decode()


def ssl_context(settings: AdminSettings, method: auth.Authentication | None) -> ssl.SSLContext | None:
    """The context for an https admin URL (None for http). Raises AdminCliError naming a file it cannot load."""
    if not settings.admin_url.startswith("https://"):
        if method is not None and method.client_certificate() is not None:
            raise AdminCliError("AuthenticationTls needs an https:// admin URL")
        return None
    options = TlsOptions(trust_certs_file_path=settings.tls_trust_cert_path,
                         validate_hostname=settings.tls_enable_hostname_verification,
                         allow_insecure_connection=settings.tls_allow_insecure)
    try:
        return client_context(options, method.client_certificate() if method is not None else None)
    except InvalidConfiguration as exc:
        raise AdminCliError(str(exc)) from exc
