"""The storage side of security: derived ledger passwords, bookies refusing a wrong master key, the bookie's HTTP token.

Wire-level cases run against real bookie (and broker) processes on a real ZooKeeper; the derivation, the
upgrade path and the HTTP access decision are pure or in-memory.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import aiohttp
import pytest

from broker.topics.names import parse_topic
from storage import digest, protocol as p
from storage.autorecovery import admin
from storage.bookie.config import load_config as load_bookie_config
from storage.bookie.http import admin_access
from storage.client.client import LedgerClient
from storage.client.config import ClientConfig
from storage.client.memory import MemoryLedgerClient, MemoryLedgerStore
from storage.errors import (
    ManagedLedgerConfigError,
    NoSuchLedgerError,
    ReplicationError,
    StorageError,
    UnauthorizedError,
    WrongLedgerPasswordError,
)
from storage.ledger_metadata import LedgerMetadata, master_key
from storage.managed_ledger import InitialPosition, ManagedLedgerConfig, ManagedLedgerFactory
from storage.managed_ledger.metadata import ManagedLedgerInfo, ledger_path as ml_path
from storage.managed_ledger.passwords import (
    LEGACY_PASSWORD,
    SECRET_PATH,
    LedgerPasswords,
    cluster_secret,
    derive_password,
    parse_secret,
)
from storage.metadata import open_store, paths
from storage.testing.processes import VENV_BIN, BookieProcess, BrokerProcess
from storage.testing.waiting import wait_until_async
from tests.bookie.support import Conn

SECRET = b"s3cret-for-tests"


# ---- derivation (pure) ----------------------------------------------------------------------------------------------


def test_derived_passwords_are_non_empty_stable_and_differ_per_ledger_name_context_and_secret():
    a = derive_password(SECRET, "managed-ledger", "t/ns/persistent/a")
    assert len(a) == 32 and a == derive_password(SECRET, "managed-ledger", "t/ns/persistent/a")
    others = {
        derive_password(SECRET, "managed-ledger", "t/ns/persistent/b"),
        derive_password(SECRET, "managed-cursor", "t/ns/persistent/a"),
        derive_password(b"another secret", "managed-ledger", "t/ns/persistent/a"),
    }
    assert a not in others and len(others) == 3
    with pytest.raises(ValueError):
        derive_password(b"", "managed-ledger", "x")


def _data(secret: bytes, name: str = "t/ns/persistent/a") -> bytes:
    return derive_password(secret, "managed-ledger", name)


@pytest.mark.parametrize("secret, previous, new_password, tried_on_open", [
    (None, (), LEGACY_PASSWORD, (LEGACY_PASSWORD,)),  # no secret: the legacy empty password
    (SECRET, (), _data(SECRET), (_data(SECRET), LEGACY_PASSWORD)),
    (SECRET, (b"old",), _data(SECRET), (_data(SECRET), _data(b"old"), LEGACY_PASSWORD)),  # rotated
    (SECRET, (SECRET, b"", b"old", b"old"), _data(SECRET), (_data(SECRET), _data(b"old"), LEGACY_PASSWORD)),
])
def test_ledger_passwords_table(secret, previous, new_password, tried_on_open):
    passwords = LedgerPasswords(secret, previous)
    assert passwords.data_ledger("t/ns/persistent/a") == new_password
    assert passwords.accepted_data("t/ns/persistent/a") == tried_on_open
    cursor = passwords.cursor_ledger("t/ns/persistent/a", "sub")
    assert passwords.accepted_cursor("t/ns/persistent/a", "sub")[0] == cursor
    assert (cursor == LEGACY_PASSWORD) == (secret is None) and (secret is None or cursor != new_password)


def test_a_configured_secret_is_the_text_or_a_file_and_never_empty(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(b"from-a-file\n")
    assert parse_secret("literal") == b"literal"
    assert parse_secret(f"file://{secret_file}") == b"from-a-file"
    for bad in ("", f"file://{tmp_path / 'missing'}"):
        with pytest.raises(ValueError):
            parse_secret(bad)
    (tmp_path / "empty").write_bytes(b"  \n")
    with pytest.raises(ValueError, match="empty"):
        parse_secret(f"file://{tmp_path / 'empty'}")


def test_broker_config_checks_the_secret():
    from broker.config import BrokerConfig

    with pytest.raises(ValueError, match="empty"):
        BrokerConfig(metadata_store_url="memory://x", managed_ledger_password_secret="").validate()
    with pytest.raises(ValueError, match="empty"):
        BrokerConfig(metadata_store_url="memory://x", managed_ledger_password_previous_secrets=("",)).validate()
    config = BrokerConfig(metadata_store_url="memory://x", managed_ledger_password_secret="hidden",
                          managed_ledger_password_previous_secrets=("older",)).validate()
    assert "hidden" not in repr(config) and "older" not in repr(config)


async def test_configuring_a_secret_after_running_with_the_generated_one_keeps_old_ledgers_openable():
    from broker.config import BrokerConfig
    from broker.service import _password_secrets

    store = await open_store(f"memory://switch-{uuid.uuid4().hex[:12]}")
    try:
        default = BrokerConfig(metadata_store_url="memory://x")
        generated, previous = await _password_secrets(default, store)
        assert previous == () and generated == await cluster_secret(store)
        configured = BrokerConfig(metadata_store_url="memory://x", managed_ledger_password_secret="chosen",
                                  managed_ledger_password_previous_secrets=("older",))
        assert await _password_secrets(configured, store) == (b"chosen", (b"older", generated))
    finally:
        await store.close()


async def test_the_generated_cluster_secret_is_made_once_and_shared():
    store = await open_store(f"memory://secret-{uuid.uuid4().hex[:12]}")
    try:
        made = iter([b"A" * 32, b"B" * 32])
        first, second = await asyncio.gather(cluster_secret(store, lambda n: next(made)),
                                             cluster_secret(store, lambda n: next(made)))
        assert first == second and len(first) == 32
        assert await cluster_secret(store) == first  # a later broker reads it
        await store.set(SECRET_PATH, b"", -1)
        with pytest.raises(ManagedLedgerConfigError):
            await cluster_secret(store)
    finally:
        await store.close()


# ---- upgrade path (in memory) ---------------------------------------------------------------------------------------


async def test_ledgers_written_with_the_empty_password_still_open_and_new_ones_get_derived_passwords():
    store = await open_store(f"memory://upgrade-{uuid.uuid4().hex[:12]}")
    ledgers = MemoryLedgerStore()
    name = "t/ns/persistent/upgraded"
    config = ManagedLedgerConfig(min_ledger_rollover_time_s=0)
    try:
        before = ManagedLedgerFactory(store, MemoryLedgerClient(ledgers))  # as every broker did before
        ml = await before.open(name, config)
        cursor = await ml.open_cursor("sub", InitialPosition.EARLIEST)
        first = await ml.add_entry(b"old-1")
        await ml.add_entry(b"old-2")
        await cursor.mark_delete(first)
        await before.settle()
        await before.close()
        assert {ledger.password for ledger in ledgers.ledgers.values()} == {LEGACY_PASSWORD}
        old_ids = set(ledgers.ledgers)

        after = ManagedLedgerFactory(store, MemoryLedgerClient(ledgers), password_secret=SECRET)
        ml = await after.open(name, config)  # recovers the old last ledger, restores the old cursor ledger
        cursor = ml.cursors["sub"]
        await ml.add_entry(b"new-1")
        assert [e.data for e in await cursor.read_entries(10)] == [b"old-2", b"new-1"]
        await cursor.mark_delete(ml.last_confirmed_entry)
        await after.settle()
        new = {lid: ledger.password for lid, ledger in ledgers.ledgers.items() if lid not in old_ids}
        assert LedgerPasswords(SECRET).data_ledger(name) in new.values()
        assert LedgerPasswords(SECRET).cursor_ledger(name, "sub") in new.values()
        assert LEGACY_PASSWORD not in new.values()
        await after.close()

        # Rotation: under a new secret the ledgers made under the old one open only while it is listed.
        rotated = ManagedLedgerFactory(store, MemoryLedgerClient(ledgers), password_secret=b"new secret")
        with pytest.raises(WrongLedgerPasswordError):
            await rotated.open(name, config)
        await rotated.close()
        rotated = ManagedLedgerFactory(store, MemoryLedgerClient(ledgers), password_secret=b"new secret",
                                       previous_password_secrets=(SECRET,))
        ml = await rotated.open(name, config)
        assert [e.data for e in await ml.cursors["sub"].read_entries(10)] == []  # all consumed, state restored
        assert ml.password == LedgerPasswords(b"new secret").data_ledger(name)
        assert ledgers.ledgers[ml.current_ledger_id].password == ml.password

        # A ledger under a password of no known secret is not opened by any fallback.
        stranger = await MemoryLedgerClient(ledgers).create_ledger(1, 1, 1, password=b"someone else's")
        with pytest.raises(WrongLedgerPasswordError):
            await ml.open_ledger(stranger.ledger_id, recovery=False)
        await rotated.close()
    finally:
        await store.close()


# ---- the bookie refuses a wrong master key, on the real wire ---------------------------------------------------------


def _add(rid: int, ledger_id: int, entry_id: int, key: bytes, lac: int) -> p.AddRequest:
    return p.AddRequest(rid, ledger_id, entry_id, 0, key, digest.package(ledger_id, entry_id, lac, 1, b"intruder"))


async def test_a_bookie_refuses_a_fence_and_an_add_with_the_wrong_password_and_the_owner_keeps_writing(start_bookies):
    cluster = start_bookies(3)
    client = await LedgerClient.open(cluster.metadata_url, ClientConfig(add_entry_timeout_s=10))
    try:
        await client.registry.wait_for(lambda r: len(r.writable()) == 3, 15)
        writer = await client.create_ledger(3, 3, 3, password=b"the owner's password")
        assert await writer.add_entry(b"one") == 0
        lid = writer.ledger_id
        for bookie in cluster.bookies:
            conn = await Conn.open(bookie.port)
            try:
                for rid, key in enumerate((master_key(b"wrong"), master_key(b""), b"")):
                    fence = await conn.request(p.ReadRequest(rid, lid, p.LAST_ENTRY, p.FLAG_FENCE, key))
                    assert fence.status == UnauthorizedError.code, (bookie.bookie_id, key)
                    add = await conn.request(_add(100 + rid, lid, 1, key, lac=0))
                    assert add.status == UnauthorizedError.code, (bookie.bookie_id, key)
                # The right key passes the same check: a plain read of what is there works for anyone.
                read = await conn.request(p.ReadRequest(9, lid, 0, 0, b""))
                assert read.status == p.OK and digest.verify(read.body, lid, 0).payload == b"one"
            finally:
                await conn.close()
        # Nothing was fenced and nothing was written: the owner goes on.
        assert await writer.add_entry(b"two") == 1
        await writer.close()
        reader = await client.open_ledger(lid, recovery=False, password=b"the owner's password")
        assert [e.payload for e in await reader.read_entries(0, 1)] == [b"one", b"two"]
        await reader.close()
        # With the right password, recovery fences as usual.
        recovered = await client.open_ledger(lid, recovery=True, password=b"the owner's password")
        assert recovered.last_add_confirmed == 1
        await recovered.close()
    finally:
        await client.close()


async def test_a_stranger_cannot_fence_or_plant_a_key_before_the_first_add(start_bookies):
    """A bookie that has not seen a ledger yet checks a fence's or add's key against the ledger's metadata:
    otherwise the first key to arrive would win, and a stranger's could lock the owner out."""
    cluster = start_bookies(3)
    client = await LedgerClient.open(cluster.metadata_url, ClientConfig(add_entry_timeout_s=10))
    try:
        await client.registry.wait_for(lambda r: len(r.writable()) == 3, 15)
        writer = await client.create_ledger(3, 3, 3, password=b"owner")  # nothing written yet
        lid = writer.ledger_id
        conn = await Conn.open(cluster.bookies[0].port)
        try:
            fence = await conn.request(p.ReadRequest(1, lid, p.LAST_ENTRY, p.FLAG_FENCE, master_key(b"stranger")))
            assert fence.status == UnauthorizedError.code
            add = await conn.request(_add(2, lid, 0, master_key(b"stranger"), lac=-1))
            assert add.status == UnauthorizedError.code
            unknown = await conn.request(p.ReadRequest(3, 987_654_321, p.LAST_ENTRY, p.FLAG_FENCE, master_key(b"")))
            assert unknown.status == NoSuchLedgerError.code  # no metadata: nothing to fence
        finally:
            await conn.close()
        assert [await writer.add_entry(b"first"), await writer.add_entry(b"second")] == [0, 1]
        recovered = await client.open_ledger(lid, recovery=True, password=b"owner")
        assert recovered.last_add_confirmed == 1
        await recovered.close()
    finally:
        await client.close()


# ---- a broker's ledgers get derived passwords; another broker takes them over -----------------------------------------


async def _ledger_metadata(store, ml_name: str) -> list[LedgerMetadata]:
    info = ManagedLedgerInfo.from_bytes((await store.get(ml_path(ml_name)))[0])
    return [LedgerMetadata.from_bytes((await store.get(paths.ledger_path(ledger.ledger_id)))[0])
            for ledger in info.ledgers]


async def _first_ledger(url: str, ml_name: str) -> int:
    store = await open_store(url)
    try:
        return ManagedLedgerInfo.from_bytes((await store.get(ml_path(ml_name)))[0]).ledgers[0].ledger_id
    finally:
        await store.close()


def test_broker_ledgers_have_distinct_derived_passwords_and_a_second_broker_takes_them_over(start_bookies, tmp_path):
    import pulsar

    cluster = start_bookies(3)
    env = {"MAGNETAR_BROKER_METADATA_SESSION_TIMEOUT_S": "3"}
    first = BrokerProcess(tmp_path / "broker-0", metadata_url=cluster.metadata_url, env=env).start(60)
    topics = [f"persistent://public/default/pw-{uuid.uuid4().hex[:8]}-{i}" for i in range(2)]
    client = pulsar.Client(first.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        for topic in topics:
            client.subscribe(topic, "sub").close()
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(5):
                producer.send(f"{topic} {i}".encode())
            producer.close()
    finally:
        client.close()

    async def passwords() -> tuple[bytes, list[list[bytes]]]:
        store = await open_store(cluster.metadata_url)
        try:
            secret = (await store.get(SECRET_PATH))[0]
            per_topic = []
            for topic in topics:
                ml_name = parse_topic(topic).managed_ledger_name
                per_topic.append([md.password for md in await _ledger_metadata(store, ml_name)])
                assert per_topic[-1], f"no ledgers for {ml_name}"
                assert set(per_topic[-1]) == {LedgerPasswords(secret).data_ledger(ml_name)}
            return secret, per_topic
        finally:
            await store.close()

    secret, per_topic = asyncio.run(passwords())
    assert len(secret) == 32
    a, b = per_topic[0][0], per_topic[1][0]
    assert a and b and a != b and len(a) == 32

    # The operator's shell reads a broker's ledger without knowing the secret (the password is in its metadata).
    lid = asyncio.run(_first_ledger(cluster.metadata_url, parse_topic(topics[0]).managed_ledger_name))
    shown = subprocess.run([str(VENV_BIN / "bookie"), "--log-level", "WARNING", "shell", "readledger", str(lid),
                            "--no-recovery", "--metadata-store", cluster.metadata_url],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "entry 0: " in shown.stdout and "entries (LAC " in shown.stdout, shown.stdout  # up to the LAC: no fence

    # Failover: the owner dies; a second broker must fence and recover its ledgers with the same passwords.
    first.kill9()
    second = BrokerProcess(tmp_path / "broker-1", metadata_url=cluster.metadata_url, env=env).start(60)
    client = pulsar.Client(second.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        for topic in topics:
            consumer = client.subscribe(topic, "sub")
            got = [consumer.receive(30_000).data() for _ in range(5)]
            assert got == [f"{topic} {i}".encode() for i in range(5)]
            consumer.close()
            producer = client.create_producer(topic)
            producer.send(b"after failover")
            producer.close()
    finally:
        client.close()
        second.stop()


# ---- the bookie's HTTP admin token ------------------------------------------------------------------------------------


@pytest.mark.parametrize("token, authorization, peer, expected", [
    (None, None, "127.0.0.1", None),               # standalone: loopback may change state
    (None, None, "::1", None),
    (None, None, "10.1.2.3", 403),                 # not configured: nobody else
    (None, "Bearer x", "10.1.2.3", 403),
    (None, None, None, 403),
    ("tok", None, "127.0.0.1", 401),               # configured: loopback needs it too
    ("tok", "Basic dTpw", "10.1.2.3", 401),
    ("tok", "Bearer ", "10.1.2.3", 401),
    ("tok", "Bearer wrong", "10.1.2.3", 403),
    ("tok", "Bearer tok", "10.1.2.3", None),
    ("tok", "bearer tok", "127.0.0.1", None),
])
def test_admin_access_table(token, authorization, peer, expected):
    refused = admin_access(token, authorization, peer)
    assert (refused[0] if refused else None) == expected


@pytest.mark.parametrize("token", ["", "  ", "has space"])
def test_a_blank_admin_token_is_refused_at_start(token, tmp_path):
    with pytest.raises(ValueError, match="http_admin_token"):
        load_bookie_config(overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path),
                                      "http_admin_token": token}, environ={})
    config = load_bookie_config(overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path)},
                                environ={"MAGNETAR_BOOKIE_HTTP_ADMIN_TOKEN": "from-env"})
    assert config.http_admin_token == "from-env" and "from-env" not in repr(config)


async def test_a_bookie_with_an_admin_token_guards_state_changes_and_keeps_gets_open(zk_url, tmp_path):
    bookie = BookieProcess(zk_url, tmp_path / "bookie" / "data", zone="zone-a",
                           env={"MAGNETAR_BOOKIE_HTTP_ADMIN_TOKEN": "the-admin-token"})
    await asyncio.to_thread(bookie.start, 60)
    base = f"http://127.0.0.1:{bookie.http_port}"
    url = f"{base}/api/v1/bookie/state/readonly"
    try:
        async with aiohttp.ClientSession() as http:
            for path in ("/health", "/metrics", "/api/v1/bookie/info"):
                async with http.get(base + path) as resp:
                    assert resp.status == 200, path
            for headers, status in (({}, 401), ({"Authorization": "Basic YTpi"}, 401),
                                    ({"Authorization": "Bearer wrong"}, 403)):
                async with http.put(url, json={"readOnly": True}, headers=headers) as resp:
                    assert resp.status == status, headers
                    assert "error" in await resp.json()
            async with http.get(f"{base}/api/v1/bookie/info") as resp:
                assert (await resp.json())["state"] == "writable"  # the refused requests changed nothing

            # The shell's decommission path: without the token it is refused, with it the bookie goes read-only.
            client = await LedgerClient.open(zk_url)
            try:
                await client.registry.wait_for(lambda r: r.get(bookie.bookie_id) is not None, 15)
                with pytest.raises(ReplicationError, match="401"):
                    await admin.set_read_only(client, bookie.bookie_id)
                await admin.set_read_only(client, bookie.bookie_id, "the-admin-token")
            finally:
                await client.close()
            async with http.get(f"{base}/api/v1/bookie/info") as resp:
                assert (await resp.json())["state"] == "readonly"
    finally:
        await asyncio.to_thread(bookie.stop)



# ---- optional TLS on the bookie port ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A test CA with a bookie certificate for 127.0.0.1 and a broker client certificate; and a stranger CA."""
    import trustme

    root = tmp_path_factory.mktemp("pki")
    ca, stranger = trustme.CA(), trustme.CA()
    files = {}

    def leaf(name: str, cert) -> None:
        files[f"{name}_cert"] = str(root / f"{name}.pem")
        files[f"{name}_key"] = str(root / f"{name}.key")
        (root / f"{name}.pem").write_bytes(b"".join(pem.bytes() for pem in cert.cert_chain_pems))
        cert.private_key_pem.write_to_path(str(root / f"{name}.key"))

    leaf("bookie", ca.issue_cert("127.0.0.1", "localhost"))
    leaf("client", ca.issue_cert("broker.magnetar.test"))
    for name, authority in (("ca", ca), ("stranger_ca", stranger)):
        files[name] = str(root / f"{name}.pem")
        authority.cert_pem.write_to_path(files[name])
    return files


def _tls_bookie_env(pki) -> dict:
    return {"MAGNETAR_BOOKIE_TLS_CERTIFICATE_PATH": pki["bookie_cert"], "MAGNETAR_BOOKIE_TLS_KEY_STORE": pki["bookie_key"],
            "MAGNETAR_BOOKIE_TLS_TRUST_STORE": pki["ca"], "MAGNETAR_BOOKIE_TLS_CLIENT_AUTHENTICATION": "true"}


async def _tls_conn(port: int, trust: str, cert: str | None = None, key: str | None = None) -> Conn:
    from storage.tls import client_context

    return Conn(*await asyncio.open_connection("127.0.0.1", port, ssl=client_context(trust, cert, key),
                                              server_hostname="127.0.0.1"))


async def test_tls_bookies_serve_tls_clients_with_certificates_and_refuse_the_rest(start_bookies, pki):
    import ssl

    cluster = await asyncio.to_thread(start_bookies, 3, env=_tls_bookie_env(pki))
    tls = ClientConfig(tls_trust_certs_file_path=pki["ca"], tls_certificate_file_path=pki["client_cert"],
                       tls_key_file_path=pki["client_key"])
    client = await LedgerClient.open(cluster.metadata_url, tls)
    try:
        await client.registry.wait_for(lambda r: len(r.writable()) == 3, 15)
        writer = await client.create_ledger(3, 3, 3, password=b"pw")
        for i in range(10):
            await writer.add_entry(f"over tls {i}".encode())
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id, recovery=False, password=b"pw")
        assert [e.payload for e in await reader.read_entries(0, 9)] == [f"over tls {i}".encode() for i in range(10)]
        await reader.close()
    finally:
        await client.close()

    bookie = cluster.bookies[0]
    good = await _tls_conn(bookie.port, pki["ca"], pki["client_cert"], pki["client_key"])
    assert (await good.request(p.ReadLacRequest(1, writer.ledger_id))).status == p.OK

    # A plain-text client on the TLS port gets no answer (at most a TLS alert), then the connection closes.
    reader, plain = await asyncio.open_connection("127.0.0.1", bookie.port)
    plain.write(p.encode(p.ReadLacRequest(2, writer.ledger_id)))
    try:
        answer = await asyncio.wait_for(reader.read(), 10)  # to EOF
    except ConnectionError:
        answer = b""
    plain.close()
    try:
        frames = p.FrameDecoder("client").feed(answer)
    except StorageError:
        frames = []
    assert not any(isinstance(f, p.ReadLacResponse) for f in frames)
    with pytest.raises(ssl.SSLCertVerificationError):  # a bookie whose certificate the client's CA did not sign
        await _tls_conn(bookie.port, pki["stranger_ca"])
    with pytest.raises((ConnectionError, ssl.SSLError)):  # no client certificate: client authentication fails
        anonymous = await _tls_conn(bookie.port, pki["ca"])
        await anonymous.request(p.ReadLacRequest(3, writer.ledger_id))
    # None of that touched the good connection.
    assert (await good.request(p.ReadLacRequest(4, writer.ledger_id))).status == p.OK
    await good.close()


async def test_autorecovery_re_replicates_between_tls_bookies(start_bookies, pki):
    """The bookies' own autorecovery clients dial their TLS peers (with the bookie's certificate) and copy
    a lost bookie's fragments; the copies pass the new bookie's master-key check."""
    env = {**_tls_bookie_env(pki), "MAGNETAR_BOOKIE_LOST_BOOKIE_RECOVERY_DELAY_S": "1",
           "MAGNETAR_BOOKIE_SESSION_TIMEOUT_S": "2", "MAGNETAR_BOOKIE_REPLICATION_POLL_INTERVAL_S": "0.2"}
    cluster = await asyncio.to_thread(start_bookies, 4, ("zone-a", "zone-b", "zone-c", "zone-a"), env)
    tls = ClientConfig(tls_trust_certs_file_path=pki["ca"], tls_certificate_file_path=pki["client_cert"],
                       tls_key_file_path=pki["client_key"])
    client = await LedgerClient.open(cluster.metadata_url, tls)
    try:
        await client.registry.wait_for(lambda r: len(r.writable()) == 4, 15)
        writer = await client.create_ledger(2, 2, 2, password=b"pw")
        for i in range(20):
            await writer.add_entry(f"entry {i}".encode())
        await writer.close()
        lost = writer.ensemble[0]
        await asyncio.to_thread(cluster.by_id(lost).kill9)

        async def replaced() -> bool:
            md, _ = await client.get_metadata(writer.ledger_id)
            return all(lost not in ensemble for _, ensemble in md.ensembles)

        await wait_until_async(replaced, 60, f"autorecovery to move the ledger off {lost}", interval_s=0.1)
        md, _ = await client.get_metadata(writer.ledger_id)
        survivors = md.ensembles[-1][1]
        for bookie_id in survivors:  # each replica, read directly from its bookie
            for eid in range(20):
                body = (await client.context.pool.read(bookie_id, writer.ledger_id, eid)).body
                assert digest.verify(body, writer.ledger_id, eid).payload == f"entry {eid}".encode()
    finally:
        await client.close()


def test_a_broker_writes_through_tls_bookies_with_the_bookkeeper_tls_settings(start_bookies, pki, tmp_path):
    import pulsar

    cluster = start_bookies(3, env=_tls_bookie_env(pki))
    broker = BrokerProcess(tmp_path / "broker", metadata_url=cluster.metadata_url, env={
        "MAGNETAR_BROKER_BOOKKEEPER_TLS_TRUST_CERTS_FILE_PATH": pki["ca"],
        "MAGNETAR_BROKER_BOOKKEEPER_TLS_CLIENT_AUTHENTICATION": "true",
        "MAGNETAR_BROKER_BOOKKEEPER_TLS_CERTIFICATE_FILE_PATH": pki["client_cert"],
        "MAGNETAR_BROKER_BOOKKEEPER_TLS_KEY_FILE_PATH": pki["client_key"],
    }).start(60)
    topic = f"persistent://public/default/tls-bookies-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"m{i}".encode())
        assert [consumer.receive(30_000).data() for _ in range(5)] == [f"m{i}".encode() for i in range(5)]
    finally:
        client.close()
        broker.stop()


def test_standalone_ignores_the_bookkeeper_tls_settings_its_plain_bookies_cannot_use(start_standalone, pki):
    import pulsar

    broker = start_standalone(env={"MAGNETAR_BROKER_BOOKKEEPER_TLS_TRUST_CERTS_FILE_PATH": pki["ca"]})
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        topic = f"persistent://public/default/standalone-tls-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"stored")
        assert consumer.receive(30_000).data() == b"stored"
    finally:
        client.close()
    assert "ignoring bookkeeper_tls_*" in broker.log_path.read_text()


@pytest.mark.parametrize("changes, error", [
    ({"tls_certificate_path": "c.pem"}, "go together"),
    ({"tls_certificate_path": "c.pem", "tls_key_store": "k.pem"}, "tls_trust_store"),
    ({"tls_client_authentication": True}, "tls_certificate_path"),
])
def test_bookie_tls_settings_are_checked(changes, error, tmp_path):
    with pytest.raises(ValueError, match=error):
        load_bookie_config(overrides={"metadata_store_url": "memory://x", "data_dir": str(tmp_path), **changes},
                           environ={})


def test_unreadable_tls_files_are_configuration_errors(pki, tmp_path):
    from storage.tls import client_context, server_context

    with pytest.raises(ValueError, match="missing.pem"):
        server_context(str(tmp_path / "missing.pem"), pki["bookie_key"])
    with pytest.raises(ValueError, match="trust"):
        server_context(pki["bookie_cert"], pki["bookie_key"], require_client_cert=True)
    with pytest.raises(ValueError, match="both"):
        client_context(pki["ca"], pki["client_cert"])
    with pytest.raises(ValueError, match="go together"):
        ClientConfig(tls_trust_certs_file_path=pki["ca"], tls_certificate_file_path=pki["client_cert"]).validate()
