"""TLS for the broker's listeners: the server SSL context, and the pulsar+ssl:// accept path.

How it works: the TLS listener is the event loop's own TLS server
(``create_server(ssl=...)``; uvloop's TLS layer is compiled, which matters for
throughput). The Pulsar connection object sees only decrypted bytes, and only
after a successful handshake. A failed handshake (a plain client on the TLS
port, a client that does not trust our certificate, a client certificate that
does not chain to our CA) closes that one socket; the loop drops such failures
silently outside debug mode, so the context's ``sslobject_class`` logs each one
once, with the reason. (A loop-level ``start_tls`` after accept could also log
the peer, but uvloop starts reading right after ``connection_made`` and would
hand the ClientHello to the accepting protocol before ``start_tls`` runs.)

Settings are Pulsar's: ``tlsCertificateFilePath`` / ``tlsKeyFilePath`` (the
broker's chain and key), ``tlsTrustCertsFilePath`` (the CA client
certificates must chain to), ``tlsRequireTrustedClientCertOnConnect`` and
``tlsAllowInsecureConnection``. Only the stdlib ``ssl`` module is used.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Callable

log = logging.getLogger(__name__)

# A peer gets this long to finish the handshake; a client that connects and says nothing holds a socket no longer.
HANDSHAKE_TIMEOUT_S = 10.0


def client_cert_mode(has_trust_certs: bool, require_trusted: bool, allow_insecure: bool) -> ssl.VerifyMode:
    """Whether the broker asks for a client certificate and whether one is required.

    * With a trust store: CERT_REQUIRED when ``require_trusted``, else CERT_OPTIONAL (a client may present a
      certificate, which must then chain to the CA, as TLS authentication needs; or none, and authenticate some
      other way).
    * ``allow_insecure`` (Pulsar: accept untrusted client certificates): the stdlib cannot verify a certificate
      and accept it anyway, so no certificate is asked for (CERT_NONE); TLS authentication cannot work then.
    * No trust store: nothing to check a certificate against, CERT_NONE.
    Raises ValueError for the contradictions (required but insecure; required without a trust store).
    """
    if require_trusted and allow_insecure:
        raise ValueError("tls_require_trusted_client_cert_on_connect and tls_allow_insecure_connection contradict "
                         "each other")
    if require_trusted and not has_trust_certs:
        raise ValueError("tls_require_trusted_client_cert_on_connect needs tls_trust_certs_file_path (the CA client "
                         "certificates must chain to)")
    if allow_insecure or not has_trust_certs:
        return ssl.CERT_NONE
    return ssl.CERT_REQUIRED if require_trusted else ssl.CERT_OPTIONAL


def tls_enabled(config) -> bool:
    return config.tls_port is not None or config.https_port is not None


def check_config(config) -> None:
    """The TLS settings hang together (called from BrokerConfig.validate, after the port checks). Raises
    ValueError naming the field."""
    if not tls_enabled(config):
        return
    for name in ("tls_certificate_file_path", "tls_key_file_path"):
        if not getattr(config, name):
            raise ValueError(f"{name} is needed when tls_port or https_port is set")
    client_cert_mode(bool(config.tls_trust_certs_file_path), config.tls_require_trusted_client_cert_on_connect,
                     config.tls_allow_insecure_connection)


def server_context(config) -> ssl.SSLContext | None:
    """The broker's server-side SSL context (both TLS listeners share it), or None when TLS is off.
    Raises ValueError naming the file when a certificate, key or CA cannot be loaded."""
    if not tls_enabled(config):
        return None
    check_config(config)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(config.tls_certificate_file_path, config.tls_key_file_path)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the broker certificate {config.tls_certificate_file_path} with key "
                         f"{config.tls_key_file_path}: {exc}") from exc
    mode = client_cert_mode(bool(config.tls_trust_certs_file_path), config.tls_require_trusted_client_cert_on_connect,
                            config.tls_allow_insecure_connection)
    if mode is not ssl.CERT_NONE:
        try:
            ctx.load_verify_locations(cafile=config.tls_trust_certs_file_path)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load tls_trust_certs_file_path {config.tls_trust_certs_file_path}: {exc}") from exc
    ctx.verify_mode = mode
    ctx.sslobject_class = _LoggedHandshake
    return ctx


class _LoggedHandshake(ssl.SSLObject):
    """The TLS object of each connection of our listeners (``sslobject_class``): a handshake that fails says why,
    once. The event loop's TLS layer (asyncio's, uvloop's) calls ``do_handshake`` on it and drops the failure
    silently; the connection is then closed without the Pulsar side ever seeing it."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            log.warning("TLS handshake failed, closing the connection: %s", handshake_failure(exc))
            raise


def handshake_failure(exc: BaseException) -> str:
    """One line saying why a handshake failed (a plain-text client shows up as a wrong record version)."""
    reason = getattr(exc, "reason", None)
    if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE"):
        return f"the client does not speak TLS ({reason})"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return f"no handshake within {HANDSHAKE_TIMEOUT_S:.0f} s"
    return f"{type(exc).__name__}: {exc}"


async def serve_tls(factory: Callable[[], asyncio.Protocol], host: str, port: int,
                    ctx: ssl.SSLContext) -> asyncio.AbstractServer:
    """A server (not yet serving) whose connections are ``factory()`` protocols behind TLS."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(factory, host, port, ssl=ctx, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S,
                                    start_serving=False)
