"""Who may call the Stream API: authentication from gRPC metadata, authorization by namespace grants, TLS.

Authentication (with ``authentication_enabled``): every call carries the
``authorization`` metadata, ``Bearer <token>`` or ``Basic <base64
user:password>``, checked by the same providers as the admin REST
(``AuthenticationService.authenticate_http``); over TLS with
``tls_require_trusted_client_cert_on_connect`` and the ``tls`` provider, a
verified client certificate's CN serves instead. No (or bad) credentials and
no ``anonymous_user_role``: UNAUTHENTICATED (StreamAuthenticationError).

Authorization (with ``authorization_enabled``): ``STREAM_ACCESS`` maps each
RPC to what it needs, checked against the namespace's grants (the same
``produce`` / ``consume`` grants as its topics), the tenant's admin roles and
the superusers, by broker/security/authorization.py. A stream is authorized by
its namespace, never by topic-level grants: a stream and a topic may share a
name, and a grant on the topic must not open the stream. Refused:
PERMISSION_DENIED (StreamAuthorizationError). The check runs on every call;
a writer or reader already open keeps its stream when a grant is revoked
(it is checked again when it reconnects).

Credentials never reach a log or an error message: only the provider's
reason (expired, bad signature, unknown user) does.
"""

from __future__ import annotations

import grpc

from broker.errors import AuthenticationError, AuthorizationError
from broker.security.authentication import role_from_certificate
from broker.security.authorization import Need
from broker.security.tls import tls_enabled
from broker.streams.errors import StreamApiError
from broker.streams.policies import parse_namespace

# RPC -> (what it needs, on what): "tenant" is the request's tenant, "namespace" its namespace.
STREAM_ACCESS: dict[str, tuple[Need, str]] = {
    "CreateNamespace": (Need.TENANT_ADMIN, "tenant"),  # as Pulsar's namespace creation
    "DeleteNamespace": (Need.TENANT_ADMIN, "tenant"),
    "ListNamespaces": (Need.TENANT_ADMIN, "tenant"),  # as Pulsar's GET /namespaces/{tenant}
    "GetNamespace": (Need.NAMESPACE_LOOKUP, "namespace"),  # produce or consume on the namespace
    "ListStreams": (Need.NAMESPACE_LOOKUP, "namespace"),  # as listing its topics
    "CreateStream": (Need.PRODUCE, "namespace"),  # as a producer creating its topic
    "DeleteStream": (Need.TENANT_ADMIN, "tenant"),  # as deleting a topic
    "GetStreamInfo": (Need.LOOKUP, "namespace"),  # produce or consume
    "Write": (Need.PRODUCE, "namespace"),
    "Truncate": (Need.PRODUCE, "namespace"),  # the writer's checkpoint (DistributedLog's truncation)
    "Read": (Need.CONSUME, "namespace"),
}

MAX_AUTHORIZATION_CHARS = 16 * 1024  # the metadata value; the providers bound what they parse as well


class _VerifiedPeer:
    """A gRPC peer's verified certificate in the shape ``role_from_certificate`` reads (ssl's getpeercert)."""

    def __init__(self, common_name: str | None):
        self.common_name = common_name

    def getpeercert(self) -> dict:
        return {"subject": ((("commonName", self.common_name),),)} if self.common_name else {}


def _metadata(context, key: str) -> str | None:
    values = [v for k, v in (context.invocation_metadata() or ()) if k == key]
    if len(values) > 1:
        raise StreamApiError("StreamAuthenticationError", f"authentication failed: {len(values)} {key} values")
    return values[0] if values else None


class StreamSecurity:
    def __init__(self, broker):
        self.broker = broker
        config = broker.config
        # gRPC puts a client certificate's CN in the auth context whether or not it was verified, unless the
        # server requires (and so verifies) one: only then may a certificate name a role.
        self.certificates_name_roles = tls_enabled(config) and config.tls_require_trusted_client_cert_on_connect

    async def role(self, context) -> str | None:
        """The role the call acts as; raises StreamApiError(StreamAuthenticationError)."""
        authentication = self.broker.authentication
        anonymous = self.broker.config.anonymous_user_role
        if not authentication.enabled:
            return anonymous
        header = _metadata(context, "authorization")
        if header is not None and len(header) > MAX_AUTHORIZATION_CHARS:
            raise StreamApiError("StreamAuthenticationError", "authentication failed: the authorization metadata "
                                 f"is longer than {MAX_AUTHORIZATION_CHARS} characters")
        peer = None
        if header is None and self.certificates_name_roles and "tls" in authentication.providers:
            names = (context.auth_context() or {}).get("x509_common_name") or []
            peer = _VerifiedPeer(names[0].decode(errors="replace") if names else None)
        try:
            if peer is not None and peer.common_name:
                return role_from_certificate(peer)
            return (await authentication.authenticate_http(header, None)).role
        except AuthenticationError as exc:
            raise StreamApiError("StreamAuthenticationError", f"authentication failed: {exc}") from None

    async def authorize(self, context, method: str, namespace: str, *, role: str | None = None) -> None:
        """Authenticate the call (unless ``role`` says who it is already), then check ``STREAM_ACCESS[method]``
        on ``namespace`` (a tenant for ListNamespaces). Raises StreamApiError: StreamAuthenticationError,
        StreamAuthorizationError, or InvalidStreamRequest for a malformed name."""
        need, scope = STREAM_ACCESS[method]
        if role is None:
            role = await self.role(context)
        authorization = self.broker.authorization
        if not authorization.enabled:
            return
        ns = parse_namespace(f"{namespace or 'public'}/x" if method == "ListNamespaces" else namespace)
        resource = ns.tenant if scope == "tenant" else ns
        try:
            await authorization.check(role, resource, need)
        except AuthorizationError as exc:
            raise StreamApiError("StreamAuthorizationError", str(exc)) from None


def server_credentials(config) -> grpc.ServerCredentials | None:
    """TLS for the stream port when the broker has TLS configured (the broker's certificate and key; client
    certificates checked against its trust store, required when it requires them), else None (plain)."""
    if not tls_enabled(config):
        return None

    def read(path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise ValueError(f"cannot read {path} for the Stream API's TLS: {exc.strerror}") from None

    trust = read(config.tls_trust_certs_file_path) if config.tls_trust_certs_file_path else None
    return grpc.ssl_server_credentials(
        [(read(config.tls_key_file_path), read(config.tls_certificate_file_path))], root_certificates=trust,
        require_client_auth=bool(trust) and config.tls_require_trusted_client_cert_on_connect)
