"""Authentication and TLS options of the Spark source and sink, under pulsar-spark's names.

``pulsar.client.authPluginClassName`` names one of the official Java client's authentication classes and
``pulsar.client.authParams`` its parameters, in that class's own format; they map onto magnetar's
authentication classes:

* ``org.apache.pulsar.client.impl.auth.AuthenticationToken``: ``token:<jwt>``, ``file:///path`` (read again
  each time the broker asks, so a rotated file is picked up), or the bare token;
* ``org.apache.pulsar.client.impl.auth.AuthenticationTls``: ``tlsCertFile:/path,tlsKeyFile:/path`` (or the
  JSON object with those keys);
* ``org.apache.pulsar.client.impl.auth.AuthenticationBasic``: JSON ``{"userId": ..., "password": ...}``.

``pulsar.client.tlsTrustCertsFilePath``, ``pulsar.client.tlsAllowInsecureConnection`` and
``pulsar.client.tlsHostnameVerificationEnable`` become the client's ``tls_*`` options. The admin REST calls
the driver plans with use the same credentials (``Authorization`` header, or the client certificate) and CA.
Everything here is plain strings, so the options travel to Spark's executors as they are.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import ssl
from pathlib import Path
from urllib.parse import urlparse

TOKEN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TLS = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
BASIC = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
PLUGINS = (TOKEN, TLS, BASIC)

AUTH_PLUGIN = "pulsar.client.authPluginClassName"
AUTH_PARAMS = "pulsar.client.authParams"
TRUST_CERTS = "pulsar.client.tlsTrustCertsFilePath"
ALLOW_INSECURE = "pulsar.client.tlsAllowInsecureConnection"
VERIFY_HOSTNAME = "pulsar.client.tlsHostnameVerificationEnable"
SECURITY_OPTIONS = {AUTH_PLUGIN, AUTH_PARAMS, TRUST_CERTS, ALLOW_INSECURE, VERIFY_HOSTNAME}


class SecurityOptionError(ValueError):
    """An authentication or TLS option is malformed or names something magnetar does not implement."""


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    """The parsed options. ``kind`` is "token", "tls", "basic" or None; ``values`` its parameters."""

    kind: str | None = None
    values: tuple[tuple[str, str], ...] = ()
    trust_certs_file_path: str | None = None
    allow_insecure_connection: bool = False
    validate_hostname: bool = False

    def _value(self, name: str) -> str:
        return dict(self.values)[name]

    def authentication(self):
        """The magnetar authentication object (None without authentication)."""
        import magnetar

        if self.kind == "token":
            if "file" in dict(self.values):
                path = self._value("file")
                return magnetar.AuthenticationToken(lambda: Path(path).read_text().strip())
            return magnetar.AuthenticationToken(self._value("token"))
        if self.kind == "tls":
            return magnetar.AuthenticationTLS(self._value("tlsCertFile"), self._value("tlsKeyFile"))
        if self.kind == "basic":
            return magnetar.AuthenticationBasic(self._value("userId"), self._value("password"))
        return None

    def client_options(self) -> dict:
        """Keyword arguments for magnetar.Client / AsyncClient."""
        options = {"authentication": self.authentication(),
                   "tls_allow_insecure_connection": self.allow_insecure_connection,
                   "tls_validate_hostname": self.validate_hostname}
        if self.trust_certs_file_path is not None:
            options["tls_trust_certs_file_path"] = self.trust_certs_file_path
        return options

    def http_headers(self) -> dict[str, str]:
        """The admin REST's ``Authorization`` header for token and basic credentials."""
        auth = self.authentication()
        if self.kind == "token":
            return {"Authorization": "Bearer " + auth.auth_data().decode()}
        if self.kind == "basic":
            return {"Authorization": "Basic " + base64.b64encode(auth.auth_data()).decode()}
        return {}

    def ssl_context(self) -> ssl.SSLContext:
        """For an https admin URL: the CA, hostname checking and (TLS authentication) the client certificate."""
        from magnetar.tls import TlsOptions, client_context

        cert = (self._value("tlsCertFile"), self._value("tlsKeyFile")) if self.kind == "tls" else None
        return client_context(TlsOptions(self.trust_certs_file_path, self.validate_hostname,
                                         self.allow_insecure_connection), cert)


def parse_security(opts: dict[str, str], service_url: str) -> ClientSecurity:
    """The security options among ``opts`` (already checked to be known names). Raises SecurityOptionError."""
    plugin, params = opts.get(AUTH_PLUGIN, "").strip(), opts.get(AUTH_PARAMS)
    kind, values = None, ()
    if plugin:
        kind, values = _auth(plugin, params or "")
    elif params:
        raise SecurityOptionError(f"option {AUTH_PARAMS!r} needs {AUTH_PLUGIN!r} (one of {', '.join(PLUGINS)})")
    security = ClientSecurity(kind, values, opts.get(TRUST_CERTS) or None, _bool(opts, ALLOW_INSECURE),
                              _bool(opts, VERIFY_HOSTNAME))
    if kind == "tls" and urlparse(service_url).scheme != "pulsar+ssl":
        raise SecurityOptionError(f"{TLS} presents a client certificate in the TLS handshake: option 'service.url' "
                                  f"must be pulsar+ssl://host:port, got {service_url!r}")
    return security


def _auth(plugin: str, params: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    if plugin == TOKEN:
        text = params.strip()
        if text.startswith("token:"):
            values = {"token": text[len("token:"):]}
        elif text.startswith("file:"):
            path = urlparse(text).path if text.startswith("file://") else text[len("file:"):]
            if not Path(path).is_file():
                raise SecurityOptionError(f"option {AUTH_PARAMS!r}: token file {path} does not exist")
            values = {"file": path}
        else:
            values = {"token": text}
        if not next(iter(values.values())):
            raise SecurityOptionError(f"option {AUTH_PARAMS!r} must be token:<jwt> or file:///path for {TOKEN}")
        return "token", tuple(values.items())
    if plugin == TLS:
        values = _json_or_pairs(params, ("tlsCertFile", "tlsKeyFile"), TLS)
        return "tls", tuple((k, values[k]) for k in ("tlsCertFile", "tlsKeyFile"))
    if plugin == BASIC:
        try:
            doc = json.loads(params)
            values = {"userId": doc["userId"], "password": doc["password"]}
        except (ValueError, KeyError, TypeError):
            raise SecurityOptionError(f"option {AUTH_PARAMS!r} for {BASIC} must be JSON "
                                      '{"userId": ..., "password": ...}') from None
        if not all(isinstance(v, str) for v in values.values()):
            raise SecurityOptionError(f"option {AUTH_PARAMS!r}: userId and password must be strings")
        return "basic", tuple(values.items())
    raise SecurityOptionError(f"option {AUTH_PLUGIN!r}: {plugin!r} is not supported; magnetar implements "
                              f"{', '.join(PLUGINS)}")


def _json_or_pairs(params: str, keys: tuple[str, ...], plugin: str) -> dict[str, str]:
    """Java's auth-params formats: a JSON object, or ``key:value,key:value``."""
    text = params.strip()
    try:
        values = json.loads(text) if text.startswith("{") else dict(
            part.split(":", 1) for part in text.split(",") if part.strip())
    except ValueError:
        values = {}
    values = {str(k).strip(): str(v).strip() for k, v in values.items()} if isinstance(values, dict) else {}
    missing = [k for k in keys if not values.get(k)]
    if missing:
        raise SecurityOptionError(f"option {AUTH_PARAMS!r} for {plugin} must give {', '.join(keys)} "
                                  f"(e.g. {keys[0]}:/path,{keys[1]}:/path); missing {', '.join(missing)}")
    return values


def _bool(opts: dict[str, str], name: str) -> bool:
    text = opts.get(name)
    if text is None:
        return False
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise SecurityOptionError(f"option {name!r} must be true or false, got {text!r}")
