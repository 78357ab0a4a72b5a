"""AsyncClient: connections per broker, lookup (following redirects), and factories for producers and consumers."""

from __future__ import annotations

import asyncio
import itertools
import re
import random
import uuid

from magnetar.asyncio.connection import Connection
from magnetar.asyncio.consumer import AsyncConsumer, ConsumerType, InitialPosition
from magnetar.asyncio.dead_letter import with_retry_defaults
from magnetar.asyncio.partitioned import MultiTopicsConsumer, PartitionedProducer
from magnetar.asyncio.producer import AsyncProducer
from magnetar.asyncio.schemas import get_schema_info
from magnetar.asyncio.service_hosts import ServiceHosts
from magnetar.schema.schema import WriterSchemas
from magnetar.auth import Authentication
from magnetar.errors import (
    AlreadyClosed, ConnectError, InvalidConfiguration, InvalidTopicName, MagnetarError, ServiceNotReady, Timeout,
    TopicNotFound, for_code,
)
from magnetar.message import MessageId
from magnetar.protocol import pulsar_api_pb2 as pb
from magnetar.tls import TlsOptions, client_context, parse_service_hosts, parse_service_url

T = pb.BaseCommand
MAX_REDIRECTS = 10


class AsyncClient:
    """``authentication``: a magnetar.auth method (AuthenticationToken / AuthenticationBasic / AuthenticationTLS).
    TLS (a ``pulsar+ssl://`` URL) takes the official client's ``tls_*`` options (magnetar/tls.py).
    ``listener_name`` asks lookups for the broker's address on that advertised listener. The service URL may name
    several hosts, ``pulsar://h1:6650,h2:6650``: they are tried in turn (asyncio/service_hosts.py)."""

    def __init__(self, service_url: str, *, operation_timeout_seconds: float = 30, rng: random.Random | None = None,
                 authentication: Authentication | None = None, tls_trust_certs_file_path: str | None = None,
                 tls_allow_insecure_connection: bool = False, tls_validate_hostname: bool = False,
                 tls_certificate_file_path: str | None = None, tls_private_key_file_path: str | None = None,
                 listener_name: str | None = None):
        addresses, self.use_tls, self.ssl_context = self.check_options(
            service_url, authentication=authentication, tls_trust_certs_file_path=tls_trust_certs_file_path,
            tls_allow_insecure_connection=tls_allow_insecure_connection, tls_validate_hostname=tls_validate_hostname,
            tls_certificate_file_path=tls_certificate_file_path, tls_private_key_file_path=tls_private_key_file_path,
            listener_name=listener_name, operation_timeout_seconds=operation_timeout_seconds)
        self.service_url = service_url
        self.service_hosts = ServiceHosts(addresses)
        self.authentication = authentication
        self.listener_name = listener_name
        self.operation_timeout_s = operation_timeout_seconds
        self.rng = rng or random.Random()
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future] = {}
        self._ids = itertools.count()
        self._handlers: list = []
        self.max_message_size = 5 * 1024 * 1024
        self.closed = False
        self.writer_schemas = WriterSchemas()  # schemas fetched by (topic, version) for decoding

    @staticmethod
    def check_options(service_url: str, *, authentication=None, tls_trust_certs_file_path=None,
                      tls_allow_insecure_connection=False, tls_validate_hostname=False, tls_certificate_file_path=None,
                      tls_private_key_file_path=None, listener_name=None, operation_timeout_seconds=30):
        """(the service URL's host addresses, uses TLS, SSL context or None) for these options. Raises ValueError for
        a wrong type or URL, InvalidConfiguration for options that do not fit together or files that cannot be
        loaded."""
        addresses, use_tls = parse_service_hosts(service_url)
        if authentication is not None and not isinstance(authentication, Authentication):
            raise ValueError(f"authentication must be a magnetar authentication (magnetar.AuthenticationToken, "
                             f"AuthenticationBasic, AuthenticationTLS), not {type(authentication).__module__}."
                             f"{type(authentication).__name__}")
        if listener_name is not None and not isinstance(listener_name, str):
            raise ValueError("Argument listener_name is expected to be of type 'str'")
        if not isinstance(operation_timeout_seconds, (int, float)) or operation_timeout_seconds <= 0:
            raise ValueError(f"operation_timeout_seconds must be a positive number, got {operation_timeout_seconds!r}")
        tls = TlsOptions(tls_trust_certs_file_path, tls_validate_hostname, tls_allow_insecure_connection,
                         tls_certificate_file_path, tls_private_key_file_path)
        client_cert = authentication.client_certificate() if authentication is not None else None
        if client_cert is not None and not use_tls:
            raise InvalidConfiguration("AuthenticationTLS presents a client certificate in the TLS handshake: it "
                                       "needs a pulsar+ssl:// service URL")
        return addresses, use_tls, (client_context(tls, client_cert) if use_tls else None)

    def next_handler_id(self) -> int:
        return next(self._ids)

    async def backoff(self, first_s: float = 0.1, max_s: float = 30.0):
        """Attempt numbers 1, 2, ...; between attempts an exponential backoff with jitter (the one retry helper)."""
        delay, attempt = first_s, 0
        while not self.closed:
            attempt += 1
            yield attempt
            await asyncio.sleep(delay * (0.5 + self.rng.random()))  # backoff between reconnect attempts
            delay = min(delay * 2, max_s)

    async def connection(self, address: str) -> Connection:
        if self.closed:
            raise AlreadyClosed("client is closed")
        conn = self._connections.get(address)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(address)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._connecting[address] = pending
            try:
                conn = await Connection.open(address, self.operation_timeout_s, ssl_context=self.ssl_context,
                                             authentication=self.authentication)
                self._connections[address] = conn
                self.max_message_size = conn.max_message_size
                pending.set_result(conn)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()
                raise
            finally:
                self._connecting.pop(address, None)
            return conn
        return await asyncio.shield(pending)

    async def service_connection(self) -> Connection:
        """A connection to a host of the service URL: the one in use while it lasts, else the hosts in turn (see
        ServiceHosts). Raises ConnectError when none can be reached, naming each host's failure."""
        current = self.service_hosts.current
        conn = self._connections.get(current) if current is not None else None
        if conn is not None and not conn.closed:
            return conn
        failures: list[MagnetarError] = []
        for address in self.service_hosts.to_try():
            try:
                conn = await self.connection(address)
            except (ConnectError, Timeout) as exc:  # this host is down or silent: the next one may answer
                failures.append(exc)
                continue
            self.service_hosts.answered(address)
            return conn
        self.service_hosts.none_answered()
        if len(failures) == 1:
            raise failures[0]
        raise ConnectError(f"no host of {self.service_url} could be reached: {'; '.join(map(str, failures))}") \
            from failures[-1]

    async def lookup(self, topic: str) -> str:
        """The address of the broker that serves ``topic`` (LOOKUP, following Redirect answers)."""
        address, authoritative = None, False
        for _ in range(MAX_REDIRECTS):
            conn = await (self.service_connection() if address is None else self.connection(address))
            lookup = pb.CommandLookupTopic(topic=topic, request_id=conn.next_request_id(), authoritative=authoritative)
            if self.listener_name is not None:
                lookup.advertised_listener_name = self.listener_name
            resp = await conn.request(T.LOOKUP, "lookupTopic", lookup)
            if resp.response == pb.CommandLookupTopicResponse.Failed:
                raise for_code(resp.error, resp.message)
            target = self._broker_address(resp, topic)
            if resp.response == pb.CommandLookupTopicResponse.Connect:
                return target
            address, authoritative = target, resp.authoritative
        raise ServiceNotReady(f"lookup of {topic} redirected more than {MAX_REDIRECTS} times")

    def _broker_address(self, resp, topic: str) -> str:
        """The lookup answer's URL for our scheme (the broker fills both; we pick, as the official client does)."""
        url = resp.brokerServiceUrlTls if self.use_tls else resp.brokerServiceUrl
        if not url:
            scheme = "pulsar+ssl://" if self.use_tls else "pulsar://"
            raise ConnectError(f"the broker serving {topic} has no {scheme} listener")
        address, tls = parse_service_url(url)
        if tls != self.use_tls:
            raise ConnectError(f"lookup of {topic} answered {url!r} for a {'TLS' if self.use_tls else 'plain'} client")
        return address

    async def connection_for(self, topic: str) -> Connection:
        return await self.connection(await self.lookup(topic))

    async def get_partitions(self, topic: str) -> int:
        conn = await self.service_connection()
        resp = await conn.request(T.PARTITIONED_METADATA, "partitionMetadata", pb.CommandPartitionedTopicMetadata(
            topic=topic, request_id=conn.next_request_id()))
        if resp.response == pb.CommandPartitionedTopicMetadataResponse.Failed:
            raise for_code(resp.error, resp.message)
        return resp.partitions

    async def get_topic_partitions(self, topic: str) -> list[str]:
        n = await self.get_partitions(topic)
        return [f"{topic}-partition-{i}" for i in range(n)] if n else [topic]

    # ---- factories -------------------------------------------------------------------

    async def create_producer(self, topic: str, message_routing_mode: int = 1, **options):
        """A producer; for a partitioned topic one per partition behind a PartitionedProducer."""
        partitions = await self.get_partitions(topic)
        if partitions == 0:
            producer = AsyncProducer(self, topic, **options)
            await self._start(producer)
            return producer
        producers = []
        for i in range(partitions):
            producer = AsyncProducer(self, f"{topic}-partition-{i}", partition=i, **options)
            await self._start(producer)
            producers.append(producer)
        wrapper = PartitionedProducer(topic, producers, message_routing_mode)
        self._handlers.append(wrapper)
        return wrapper

    async def subscribe(self, topic, subscription_name: str, *, retry_enable: bool = False, **options):
        """A consumer of a topic, of every partition of a partitioned topic, or of a list of topics.

        With ``retry_enable`` it also consumes the retry-letter topic (see ``asyncio/dead_letter.py``).
        """
        if isinstance(topic, re.Pattern):
            named = options.get("dead_letter_policy")
            if retry_enable and (named is None or not named.retry_letter_topic):
                raise InvalidConfiguration("retry_enable on a topics pattern needs the dead-letter policy's "
                                           "retry_letter_topic (there is no first topic to name it after)")
            topics = await self._topics_matching(topic)
            if not topics:
                raise TopicNotFound(f"no topic matches {topic.pattern!r}")
            topic = topics
        topics = [topic] if isinstance(topic, str) else list(topic)
        name = topic if isinstance(topic, str) else ",".join(topics)
        if retry_enable:
            if not topics:
                raise InvalidConfiguration("retry_enable needs at least one topic")
            policy = with_retry_defaults(options.get("dead_letter_policy"), topics[0], subscription_name)
            options.update(dead_letter_policy=policy, retry_enable=True)
            if policy.retry_letter_topic not in topics:
                topic = topics = [*topics, policy.retry_letter_topic]
        expanded: list[tuple[str, int]] = []
        for each in topics:
            partitions = await self.get_partitions(each)
            expanded += [(f"{each}-partition-{i}", i) for i in range(partitions)] if partitions else [(each, -1)]
        consumers = []
        for part, index in expanded:
            consumer = AsyncConsumer(self, part, subscription_name, partition=index, **options)
            await self._start(consumer)
            consumers.append(consumer)
        if isinstance(topic, str) and len(expanded) == 1 and expanded[0][1] < 0:
            return consumers[0]
        wrapper = MultiTopicsConsumer(name, consumers, options.get("receiver_queue_size", 1000))
        self._handlers.append(wrapper)
        return wrapper

    async def _topics_matching(self, pattern: re.Pattern) -> list[str]:
        """Topics of the pattern's namespace (GET_TOPICS_OF_NAMESPACE) whose full name matches it."""
        m = re.match(r"^(persistent://)?([^/]+)/([^/]+)/", pattern.pattern)
        if not m:
            raise InvalidTopicName(f"a topics pattern must start with persistent://<tenant>/<namespace>/, got {pattern.pattern!r}")
        conn = await self.service_connection()
        resp = await conn.request(T.GET_TOPICS_OF_NAMESPACE, "getTopicsOfNamespace", pb.CommandGetTopicsOfNamespace(
            request_id=conn.next_request_id(), namespace=f"{m.group(2)}/{m.group(3)}"))
        return sorted(t for t in resp.topics if pattern.fullmatch(t))

    async def create_reader(self, topic: str, start_message_id: MessageId, *, start_message_id_inclusive: bool = False,
                            receiver_queue_size: int = 1000, reader_name: str | None = None,
                            schema=None, is_read_compacted: bool = False) -> "AsyncReader":
        consumer = AsyncConsumer(
            self, topic, f"reader-{uuid.uuid4().hex[:10]}", consumer_type=ConsumerType.Exclusive, durable=False,
            initial_position=InitialPosition.Earliest if start_message_id == MessageId.earliest else InitialPosition.Latest,
            start_message_id=start_message_id, start_message_id_inclusive=start_message_id_inclusive,
            receiver_queue_size=receiver_queue_size, consumer_name=reader_name, schema=schema,
            is_read_compacted=is_read_compacted)
        await self._start(consumer)
        return AsyncReader(consumer)

    async def create_table_view(self, topic: str, schema=None) -> "AsyncTableView":
        """A TableView: the latest value of each key of ``topic``, loaded from its compacted view and kept up to
        date (see asyncio/table_view.py)."""
        from magnetar.asyncio.table_view import AsyncTableView

        reader = await self.create_reader(topic, MessageId.earliest, is_read_compacted=True, schema=schema)
        view = AsyncTableView(reader, schema)
        try:
            await view.load()
        except BaseException:
            await reader.close()
            raise
        self._handlers.append(view)
        return view

    async def get_schema_info(self, topic: str, version: int | None = None):
        """The topic's schema (a magnetar.schema.SchemaInfo), latest or by version; TopicNotFound without one."""
        return await get_schema_info(self, topic, version)

    async def _start(self, handler) -> None:
        try:
            await handler._connect()
        except ConnectError:
            raise
        self._handlers.append(handler)

    async def close(self) -> None:
        for handler in reversed(self._handlers):  # wrappers (added after their parts) stop their pumps first
            try:
                await handler.close()
            except MagnetarError:
                pass
        self.closed = True
        for conn in self._connections.values():
            conn.close()


class AsyncReader:
    """A non-durable consumer that reads from a given message id."""

    def __init__(self, consumer: AsyncConsumer):
        self.consumer = consumer

    async def read_next(self, timeout_millis: int | None = None):
        return await self.consumer.receive(timeout_millis)

    async def has_message_available(self) -> bool:
        if self.consumer.has_queued():
            return True
        last = await self.consumer.get_last_message_id()
        if last.entry_id() < 0:
            return False
        seen = self.consumer._last_dequeued
        if seen is None:
            start, inclusive = self.consumer._start
            if start is None or start == MessageId.earliest:
                return True
            if start == MessageId.latest:
                return False
            return (last.ledger_id(), last.entry_id(), last.batch_index()) > (start.ledger_id(), start.entry_id(), start.batch_index()) or inclusive
        return (last.ledger_id(), last.entry_id(), last.batch_index()) > (seen.ledger_id(), seen.entry_id(), seen.batch_index())

    async def seek(self, target) -> None:
        await self.consumer.seek(target)

    def topic(self) -> str:
        return self.consumer.topic()

    async def close(self) -> None:
        await self.consumer.close()
