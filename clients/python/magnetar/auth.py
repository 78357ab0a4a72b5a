"""Client authentication, with the official client's class and argument names (``pulsar.AuthenticationToken``...).

What goes on the wire (pure; the connection only sends what these build):

* CONNECT carries ``auth_method_name`` and ``auth_data``: ``"token"`` and the token's bytes; ``"basic"`` and
  ``user:password``; ``"tls"`` and nothing, the identity being the client certificate presented in the TLS
  handshake (so AuthenticationTLS needs a ``pulsar+ssl://`` URL).
* When the broker sends AUTH_CHALLENGE (a token expired on a live connection, or a provider that needs more
  rounds), the client answers AUTH_RESPONSE with fresh data: a token supplier callable is called again.
"""

from __future__ import annotations

import json

from magnetar.errors import InvalidConfiguration
from magnetar.protocol import pulsar_api_pb2 as pb

# A credential larger than this is a mistake (a file read whole by accident), not a token.
MAX_AUTH_DATA_BYTES = 64 * 1024


def _check_type(expected, value, name: str) -> None:
    if not isinstance(value, expected):
        raise ValueError(f"Argument {name} is expected to be of type '{expected.__name__}' and not "
                         f"'{type(value).__name__}'")


class Authentication:
    """Base of the client's authentication methods. ``auth_data()`` is called for each CONNECT and each
    answer to an AUTH_CHALLENGE."""

    method_name = "none"

    def auth_data(self) -> bytes:
        return b""

    def client_certificate(self) -> tuple[str, str] | None:
        """(certificate path, key path) to present in the TLS handshake, or None."""
        return None


class AuthenticationToken(Authentication):
    """A JWT, given as a string or as a callable returning one (called again whenever the broker asks)."""

    method_name = "token"

    def __init__(self, token):
        if not (isinstance(token, str) or callable(token)):
            raise ValueError("Argument token is expected to be of type 'str' or a function returning 'str'")
        self._token = token

    def auth_data(self) -> bytes:
        token = self._token() if callable(self._token) else self._token
        if not isinstance(token, str):
            raise InvalidConfiguration(f"the token supplier returned {type(token).__name__}, not str")
        return _bounded(token.strip().encode())


class AuthenticationBasic(Authentication):
    """Username and password (``auth_params_string``: JSON with ``username``, ``password``, optional ``method``)."""

    def __init__(self, username=None, password=None, method="basic", auth_params_string=None):
        if auth_params_string is not None:
            _check_type(str, auth_params_string, "auth_params_string")
            try:
                params = json.loads(auth_params_string)
                username, password = params["username"], params["password"]
                method = params.get("method", "basic")
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"auth_params_string must be JSON with username and password: {exc}") from exc
        _check_type(str, username, "username")
        _check_type(str, password, "password")
        _check_type(str, method, "method")
        if ":" in username:
            raise ValueError("a basic-auth username cannot contain ':'")
        self.username, self._password, self.method_name = username, password, method

    def auth_data(self) -> bytes:
        return _bounded(f"{self.username}:{self._password}".encode())


class AuthenticationTLS(Authentication):
    """A client certificate and its key, presented in the TLS handshake; the broker's role is its CN."""

    method_name = "tls"

    def __init__(self, certificate_path, private_key_path):
        _check_type(str, certificate_path, "certificate_path")
        _check_type(str, private_key_path, "private_key_path")
        self.certificate_path, self.private_key_path = certificate_path, private_key_path

    def client_certificate(self) -> tuple[str, str]:
        return self.certificate_path, self.private_key_path


def _bounded(data: bytes) -> bytes:
    if len(data) > MAX_AUTH_DATA_BYTES:
        raise InvalidConfiguration(f"authentication data of {len(data)} bytes is over the {MAX_AUTH_DATA_BYTES} limit")
    return data


def connect_command(client_version: str, protocol_version: int, auth: Authentication | None) -> pb.CommandConnect:
    """The CONNECT body, with the method name and credentials when ``auth`` is given. It declares
    ``supports_auth_refresh`` (the client answers AUTH_CHALLENGE: magnetar.asyncio.inbound), without which a
    broker closes the connection when its token expires instead of challenging it, as the official clients do."""
    connect = pb.CommandConnect(client_version=client_version, protocol_version=protocol_version,
                                feature_flags=pb.FeatureFlags(supports_auth_refresh=True))
    if auth is not None:
        connect.auth_method_name = auth.method_name
        connect.auth_data = auth.auth_data()
    return connect


def auth_response_command(client_version: str, protocol_version: int, auth: Authentication | None,
                          challenge: pb.CommandAuthChallenge) -> pb.CommandAuthResponse:
    """The AUTH_RESPONSE to a broker's challenge: fresh data of our method (none without ``auth``)."""
    method = auth.method_name if auth is not None else "none"
    data = auth.auth_data() if auth is not None else b""
    return pb.CommandAuthResponse(client_version=client_version, protocol_version=protocol_version,
                                  response=pb.AuthData(auth_method_name=method, auth_data=data))


