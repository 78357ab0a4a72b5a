"""The Stream API behind authentication and authorization: a real `broker standalone` with the token provider, no
anonymous role, authorization on and the superuser ``root``; grants are given over the admin REST, as an operator
would. Every call carries ``authorization: Bearer <token>`` gRPC metadata (magnetar.AuthenticationToken)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
import uuid

import grpc
import pytest

import magnetar
from broker.security import tokens
from broker.streams.security import STREAM_ACCESS
from magnetar.streams import (
    EARLIEST, InvalidStreamRequest, StreamAuthenticationError, StreamAuthorizationError, StreamClient,
    StreamUnavailable,
)
from magnetar.streams import stream_api_pb2 as pb
from magnetar.streams.sync import StreamClient as SyncStreamClient
from storage.testing.processes import BrokerProcess, free_port
from storage.testing.waiting import wait_until_async
from tests.fixtures.security import tls_config_toml


@pytest.fixture(scope="module")
def secret(tmp_path_factory):
    path = tmp_path_factory.mktemp("stream-keys") / "secret.key"
    key = tokens.create_secret_key()
    path.write_bytes(key)
    return path, key


@pytest.fixture(scope="module")
def broker(tmp_path_factory, secret):
    process = BrokerProcess(tmp_path_factory.mktemp("stream-auth") / "data", env={
        "MAGNETAR_BROKER_AUTHENTICATION_ENABLED": "true",
        "MAGNETAR_BROKER_AUTHENTICATION_PROVIDERS": "token",
        "MAGNETAR_BROKER_TOKEN_SECRET_KEY": f"file://{secret[0]}",
        "MAGNETAR_BROKER_AUTHORIZATION_ENABLED": "true",
        "MAGNETAR_BROKER_SUPER_USER_ROLES": "root",
    })
    process.start(timeout_s=60)
    try:
        create_tenant_public(process, secret)
        yield process
    finally:
        process.stop()


def token(secret, role: str, expires_in_s: float | None = None) -> str:
    return tokens.create_token(secret[1], role, None if expires_in_s is None else time.time() + expires_in_s)


def as_role(broker, secret, role: str) -> StreamClient:
    return StreamClient(broker.stream_address, timeout_s=15,
                        authentication=magnetar.AuthenticationToken(token(secret, role)))


def as_root(broker, secret, method: str, path: str, body) -> None:
    """One admin REST call by the superuser ``root``, which must succeed."""
    request = urllib.request.Request(
        f"{broker.web_url}{path}", method=method, data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token(secret, 'root')}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=15) as response:
        assert response.status in (200, 204)


def create_tenant_public(broker, secret) -> None:
    """The tenant of the ``names`` fixture's namespaces. With authorization on the broker does not create it at
    start: a superuser does, as an operator would."""
    as_root(broker, secret, "PUT", "/admin/v2/tenants/public", {"adminRoles": [], "allowedClusters": ["standalone"]})


def grant(broker, secret, namespace: str, role: str, actions: list[str]) -> None:
    as_root(broker, secret, "POST", f"/admin/v2/namespaces/{namespace}/permissions/{role}", actions)


def test_every_rpc_of_the_service_declares_what_it_needs():
    rpcs = {m.name for m in pb.DESCRIPTOR.services_by_name["StreamService"].methods}
    assert rpcs == set(STREAM_ACCESS)


async def test_a_call_without_credentials_or_with_bad_ones_is_unauthenticated(broker, secret, names):
    ns, name = names
    async with as_role(broker, secret, "root") as root:
        await root.create_namespace(ns)
        await root.create_stream(ns, name)
    async with StreamClient(broker.stream_address, timeout_s=15) as anonymous:
        with pytest.raises(StreamAuthenticationError, match="no anonymous role") as caught:
            await anonymous.get_info(ns, name)
        assert caught.value.status is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(StreamAuthenticationError):
            await anonymous.open_writer(ns, name)
        with pytest.raises(StreamAuthenticationError):
            await anonymous.open_reader(ns, name, EARLIEST).open()
        with pytest.raises(StreamAuthenticationError):
            await anonymous.create_namespace(f"{ns}-other")
    expired = token(secret, "root", expires_in_s=-60)
    forged = tokens.create_token(tokens.create_secret_key(), "root")
    for bad in (expired, forged):
        async with StreamClient(broker.stream_address, timeout_s=15,
                                authentication=magnetar.AuthenticationToken(bad)) as client:
            with pytest.raises(StreamAuthenticationError):
                await client.list_streams(ns)
    log = broker.log_path.read_text(errors="replace")
    assert expired not in log and forged not in log and token(secret, "root") not in log


async def test_namespace_grants_decide_who_writes_reads_and_administers_streams(broker, secret, names):
    ns, name = names
    async with as_role(broker, secret, "root") as root:
        await root.create_namespace(ns)
        await root.create_stream(ns, name)
    writer_role, reader_role = f"w{uuid.uuid4().hex[:6]}", f"r{uuid.uuid4().hex[:6]}"
    async with as_role(broker, secret, writer_role) as alice, as_role(broker, secret, reader_role) as bob:
        with pytest.raises(StreamAuthorizationError) as caught:  # no grant yet
            await alice.open_writer(ns, name)
        assert caught.value.status is grpc.StatusCode.PERMISSION_DENIED and writer_role in str(caught.value)
        with pytest.raises(StreamAuthorizationError):
            await alice.create_namespace(f"{ns}-mine")  # a tenant admin's
        grant(broker, secret, ns, writer_role, ["produce"])
        grant(broker, secret, ns, reader_role, ["consume"])

        async def writes() -> object:
            try:
                return await alice.open_writer(ns, name)
            except StreamAuthorizationError:
                return None  # the broker hears of the grant through its metadata watch

        writer = await wait_until_async(writes, 10, "the produce grant to reach the broker")
        await writer.append_batch([b"a", b"b"])
        await alice.create_stream(ns, f"{name}-2")  # produce creates streams
        with pytest.raises(StreamAuthorizationError):
            await alice.open_reader(ns, name, EARLIEST).open()  # produce is not consume
        with pytest.raises(StreamAuthorizationError):
            await alice.delete_stream(ns, f"{name}-2")  # deleting is a tenant admin's

        reader = bob.open_reader(ns, name, EARLIEST)
        records = []
        while len(records) < 2:
            records.extend(await asyncio.wait_for(reader.read_batch(), 15))
        assert [r.data for r in records] == [b"a", b"b"]
        await reader.close()
        assert (await bob.get_info(ns, name)).next_sequence == 2
        with pytest.raises(StreamAuthorizationError):
            await bob.open_writer(ns, name)
        with pytest.raises(StreamAuthorizationError):
            await bob.truncate(ns, name, records[1].position)
        await writer.close()
    async with as_role(broker, secret, "root") as root:
        await root.delete_stream(ns, f"{name}-2")
        assert await root.list_streams(ns) == [name]


def test_the_sync_client_carries_credentials_too(broker, secret, names):
    ns, name = names
    with SyncStreamClient(broker.stream_address, timeout_s=15,
                          authentication=magnetar.AuthenticationToken(lambda: token(secret, "root"))) as root:
        root.create_namespace(ns)
        root.create_stream(ns, name)
        assert root.list_streams(ns) == [name]
    with pytest.raises(InvalidStreamRequest, match="unsupported authentication"):
        StreamClient(broker.stream_address, authentication=magnetar.auth.Authentication())


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, tls_files, secret):
    """TLS on (client certificates required, so a certificate's CN may name a role), the tls and token
    providers, authorization on with the superuser ``root``."""
    root = tmp_path_factory.mktemp("stream-tls")
    config = root / "broker.toml"
    config.write_text(tls_config_toml(tls_files, free_port(), free_port(),
                                      tls_require_trusted_client_cert_on_connect=True))
    process = BrokerProcess(root / "data", extra_args=["--config", str(config)], env={
        "MAGNETAR_BROKER_AUTHENTICATION_ENABLED": "true",
        "MAGNETAR_BROKER_AUTHENTICATION_PROVIDERS": "tls,token",
        "MAGNETAR_BROKER_TOKEN_SECRET_KEY": f"file://{secret[0]}",
        "MAGNETAR_BROKER_AUTHORIZATION_ENABLED": "true",
        "MAGNETAR_BROKER_SUPER_USER_ROLES": "root",
    })
    process.start(timeout_s=60)
    try:
        create_tenant_public(process, secret)
        yield process
    finally:
        process.stop()


async def test_over_tls_a_verified_client_certificate_names_the_role(tls_broker, tls_files, secret, names):
    ns, name = names
    address = f"grpcs://{tls_broker.stream_address}"
    ca = str(tls_files.ca_path)
    async with StreamClient(address, timeout_s=15, tls_trust_certs_file_path=ca,
                            authentication=magnetar.AuthenticationTLS(*tls_files.client("root"))) as root:
        await root.create_namespace(ns)
        await root.create_stream(ns, name)
    async with StreamClient(address, timeout_s=15, tls_trust_certs_file_path=ca,
                            authentication=magnetar.AuthenticationTLS(*tls_files.client("nobody"))) as nobody:
        with pytest.raises(StreamAuthorizationError, match="nobody"):
            await nobody.open_writer(ns, name)
    async with StreamClient(tls_broker.stream_address, timeout_s=2) as plain:  # the port speaks TLS only
        with pytest.raises(StreamUnavailable):
            await plain.list_streams(ns)
    async with StreamClient(address, timeout_s=2, tls_trust_certs_file_path=str(tls_files.other_ca_path),
                            authentication=magnetar.AuthenticationTLS(*tls_files.client("root"))) as untrusting:
        with pytest.raises(StreamUnavailable):  # the broker's certificate does not chain to this CA
            await untrusting.list_streams(ns)
