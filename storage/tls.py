"""TLS contexts for the bookie port: the bookie's server side and the ledger client's side.

TLS is all-or-nothing per cluster: a bookie configured with a certificate
serves only TLS on its data port, and a ledger client configured with a trust
store dials every bookie with TLS, checking the certificate against the
address it dials (the bookie's advertised address, an IP or a host name).
With client authentication on, a bookie accepts only clients whose
certificate chains to its trust store (BookKeeper's ``tlsClientAuthentication``).
PEM files only. Errors in the files are configuration errors: ValueError
naming the file, raised when the context is built (at start).
"""

from __future__ import annotations

import ssl


def server_context(certificate_path: str, key_path: str, trust_path: str | None = None,
                   require_client_cert: bool = False) -> ssl.SSLContext:
    """The bookie's context. Raises ValueError for unreadable or mismatched files."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, certificate_path, key_path)
    if trust_path:
        _load_trust(context, trust_path)
    if require_client_cert:
        if not trust_path:
            raise ValueError("client authentication needs a trust store to check client certificates against")
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(trust_path: str, certificate_path: str | None = None, key_path: str | None = None) -> ssl.SSLContext:
    """The ledger client's context: verifies the bookie's certificate and host; presents a certificate if given.

    Raises ValueError for unreadable or mismatched files.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_trust(context, trust_path)
    if certificate_path or key_path:
        if not (certificate_path and key_path):
            raise ValueError("a client certificate needs both its certificate file and its key file")
        _load_chain(context, certificate_path, key_path)
    return context


def _load_chain(context: ssl.SSLContext, certificate_path: str, key_path: str) -> None:
    try:
        context.load_cert_chain(certificate_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the TLS certificate {certificate_path} with key {key_path}: {exc}") from exc


def _load_trust(context: ssl.SSLContext, trust_path: str) -> None:
    try:
        context.load_verify_locations(cafile=trust_path)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the TLS trust certificates {trust_path}: {exc}") from exc
