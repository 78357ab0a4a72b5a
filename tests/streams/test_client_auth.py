"""What the stream client sends for each Pulsar-style authentication (pure: no broker)."""

import base64

import pytest

import magnetar
from magnetar.streams import InvalidStreamRequest, StreamClient
from magnetar.streams.client import authorization_metadata


def test_a_token_is_a_bearer_and_a_supplier_is_asked_on_every_call():
    issued = iter(["first", "second"])
    auth = magnetar.AuthenticationToken(lambda: next(issued))
    assert authorization_metadata(auth) == (("authorization", "Bearer first"),)
    assert authorization_metadata(auth) == (("authorization", "Bearer second"),)
    assert authorization_metadata(magnetar.AuthenticationToken(" tok \n")) == (("authorization", "Bearer tok"),)


def test_basic_is_base64_of_user_and_password_and_tls_and_none_send_nothing():
    (key, value), = authorization_metadata(magnetar.AuthenticationBasic("bob", "pa:ss"))
    assert key == "authorization" and value.startswith("Basic ")
    assert base64.b64decode(value.removeprefix("Basic ")) == b"bob:pa:ss"
    assert authorization_metadata(magnetar.AuthenticationTLS("cert.pem", "key.pem")) == ()
    assert authorization_metadata(None) == ()


def test_an_unsupported_authentication_or_an_unreadable_trust_file_is_refused_at_construction(tmp_path):
    with pytest.raises(InvalidStreamRequest, match="unsupported authentication"):
        StreamClient("127.0.0.1:1", authentication=magnetar.auth.Authentication())
    with pytest.raises(InvalidStreamRequest, match="authentication must be"):
        StreamClient("127.0.0.1:1", authentication="token")
    with pytest.raises(InvalidStreamRequest, match="cannot read"):
        StreamClient("grpcs://127.0.0.1:1", tls_trust_certs_file_path=str(tmp_path / "missing.pem"))
