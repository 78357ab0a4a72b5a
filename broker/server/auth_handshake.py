"""Authentication on a binary connection: CONNECT's credentials, and AUTH_CHALLENGE / AUTH_RESPONSE refresh.

How this works (Pulsar's ServerCnx, with the same steps and the same setting):

1. CONNECT carries ``auth_method_name`` and ``auth_data``. With authentication on, the broker asks the
   AuthenticationService (broker/security/authentication.py) for a role before it answers; the answer is
   CONNECTED with the role kept in ``conn.auth_role``, or ERROR AuthenticationError naming what was wrong,
   after which that connection (only) is closed. Nothing else is judged until then: a command pipelined
   before CONNECTED closes the connection, as in Pulsar.
2. A credential may expire (a token's ``exp``). Every ``authentication_refresh_check_s`` (Pulsar's
   authenticationRefreshCheckSeconds) the connection's credential is checked: when it has expired, the
   broker sends AUTH_CHALLENGE (method, data "PulsarAuthRefresh"); the client answers AUTH_RESPONSE with
   fresh data (the official clients call their token supplier again). A fresh credential for the same role
   keeps the connection, with the new expiry; a bad one, one for another role, a challenge still
   unanswered at the next check, or a client that never said it supports refresh
   (``FeatureFlags.supports_auth_refresh``) closes it. Producers and consumers on it carry on untouched.

``refresh_action`` is the pure decision; the rest is the thin asyncio part.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass

from broker.errors import AuthenticationError
from broker.security.authentication import MAX_AUTH_METHOD_CHARS, Authenticated
from magnetar.protocol import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)
T = pb.BaseCommand
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"  # what Pulsar's brokers put in a refresh challenge
AUTH_ERROR_REQUEST_ID = (1 << 64) - 1  # Pulsar answers authentication errors with request id -1


@dataclass
class AuthState:
    """What the broker knows of a connection's credential."""

    authenticated: Authenticated
    supports_refresh: bool
    challenge_pending: bool = False
    checking: bool = False  # an AUTH_RESPONSE is being checked; another one meanwhile is dropped (bounded work)


CHECKING = object()  # conn.auth_state while CONNECT's credentials are being checked


class RefreshAction(enum.Enum):
    NOTHING = "nothing"
    CHALLENGE = "challenge"  # send AUTH_CHALLENGE and wait for AUTH_RESPONSE
    CLOSE_UNANSWERED = "close: the last challenge went unanswered"
    CLOSE_NO_REFRESH = "close: the credential expired and the client cannot refresh it"


def refresh_action(now: float, expires_at: float | None, challenge_pending: bool,
                   supports_refresh: bool) -> RefreshAction:
    """What a periodic check does with a connection whose credential expires at ``expires_at``."""
    if expires_at is None or now < expires_at:
        return RefreshAction.NOTHING
    if not supports_refresh:
        return RefreshAction.CLOSE_NO_REFRESH
    if challenge_pending:
        return RefreshAction.CLOSE_UNANSWERED
    return RefreshAction.CHALLENGE


# ---- CONNECT -------------------------------------------------------------------------------------------------


def credentials_of(connect) -> tuple[str, bytes]:
    """(auth_method_name, auth_data) of a CONNECT; an old client's enum method reads as its name."""
    if connect.HasField("auth_method_name"):
        method = connect.auth_method_name
    elif connect.HasField("auth_method") and connect.auth_method != pb.AuthMethodNone:
        method = pb.AuthMethod.Name(connect.auth_method)[len("AuthMethod"):].lower()
    else:
        method = "none"
    return method, connect.auth_data


def authenticate_connect(conn, connect, answer) -> None:
    """Authenticate CONNECT, then call ``answer()`` (which sends CONNECTED); refuse and close on failure."""
    if conn.auth_state is not None:
        # The session takes a CONNECT until CONNECTED is sent; a second one while the first is being checked
        # would queue another check (bcrypt is slow on purpose), so it ends the connection.
        log.warning("%s sent CONNECT again while the first was being authenticated; closing", conn.remote_address)
        conn.close()
        return
    conn.auth_state = CHECKING
    service = conn.service.authentication
    method, data = credentials_of(connect)
    supports_refresh = connect.HasField("feature_flags") and connect.feature_flags.supports_auth_refresh

    async def run():
        try:
            result = await service.authenticate(method, data, _ssl_object(conn))
        except AuthenticationError as exc:
            refuse(conn, exc, "connect", method)
            return
        if conn.closed:
            return
        conn.auth_role = result.role
        conn.auth_state = AuthState(result, supports_refresh)
        log.info("%s authenticated as role %r by %s", conn.remote_address, result.role, result.method)
        answer()
        if result.expires_at is not None:
            conn.tasks.spawn(_refresh_loop(conn))

    conn.tasks.spawn(run())


def refuse(conn, exc: AuthenticationError, doing: str, method: str) -> None:
    """ERROR AuthenticationError with what was wrong, then close this connection only."""
    log.warning("%s: authentication failed on %s (method %r): %s", conn.remote_address, doing,
                method[:MAX_AUTH_METHOD_CHARS], exc)
    conn.write(T.ERROR, error=pb.CommandError(request_id=AUTH_ERROR_REQUEST_ID, error=exc.code, message=str(exc)))
    conn.close()


def _ssl_object(conn):
    return conn.transport.get_extra_info("ssl_object") if conn.transport is not None else None


# ---- refresh -------------------------------------------------------------------------------------------------


async def _refresh_loop(conn, clock=time.time) -> None:
    interval = conn.config.authentication_refresh_check_s
    while not conn.closed:
        await asyncio.sleep(interval)  # a period, as Pulsar's scheduleAtFixedRate: nothing to wait for
        state = conn.auth_state
        action = refresh_action(clock(), state.authenticated.expires_at, state.challenge_pending,
                                state.supports_refresh)
        if action is RefreshAction.NOTHING:
            continue
        if action is not RefreshAction.CHALLENGE:
            log.info("%s: closing the connection of role %r (%s)", conn.remote_address, conn.auth_role, action.value)
            conn.close()
            return
        log.info("%s: the credential of role %r expired; challenging the client to refresh it",
                 conn.remote_address, conn.auth_role)
        state.challenge_pending = True
        conn.write(T.AUTH_CHALLENGE, authChallenge=pb.CommandAuthChallenge(
            server_version=conn.service.version, protocol_version=conn.session.protocol_version,
            challenge=pb.AuthData(auth_method_name=state.authenticated.method, auth_data=REFRESH_AUTH_DATA)))


def on_auth_response(conn, frame) -> None:
    """AUTH_RESPONSE on a connected session: the client's fresh credential. Checked with the provider that
    authenticated the connection; it must name the same role."""
    state = getattr(conn, "auth_state", None)
    if not isinstance(state, AuthState):
        log.warning("%s sent AUTH_RESPONSE, but authentication is off or nothing was asked; ignored",
                    conn.remote_address)
        return
    if state.checking:
        log.warning("%s sent AUTH_RESPONSE while its last one is being checked; dropped", conn.remote_address)
        return
    response = frame.command.authResponse.response
    method = state.authenticated.method
    service = conn.service.authentication
    state.checking = True

    async def run():
        state.challenge_pending = False
        try:
            if method not in service.providers:
                raise AuthenticationError(f"the {method} role {state.authenticated.role!r} has nothing to refresh")
            result = await service.authenticate(method, response.auth_data, _ssl_object(conn))
            if result.role != state.authenticated.role:
                raise AuthenticationError(f"the refreshed credential names role {result.role!r}, not "
                                          f"{state.authenticated.role!r}: a role cannot change on a connection")
        except AuthenticationError as exc:
            refuse(conn, exc, "refresh", method)
            return
        finally:
            state.checking = False
        state.authenticated = result
        log.info("%s: refreshed the credential of role %r", conn.remote_address, result.role)

    conn.tasks.spawn(run())
