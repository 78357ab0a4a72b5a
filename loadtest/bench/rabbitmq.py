"""RabbitMQ, the durable peer of `bench peers`: a throwaway node and the two durable queue kinds.

The node is Debian's `rabbitmq-server` run as a child of the bench, never as a daemon: its own
`epmd` on a free loopback port (so a system epmd on 4369, if any, is neither used nor needed),
Erlang distribution bound to 127.0.0.1 on a free port, AMQP and stream listeners on free loopback
ports, data, logs, cookie and config in a temporary directory. ``stop()`` ends both children.

What each kind promises before its confirm, which is what the comparison is about:

* **quorum queue** (AMQP 0-9-1 with publisher confirms, driven by aio-pika): a Raft log whose
  write-ahead log is fdatasync'd before an entry counts as written, so a confirm means "on disk";
* **stream** (the stream protocol with publish confirms, driven by rstream): the segment is
  written to the OS, not fsync'd -- durability comes from replication, which a single node has
  none of. It is the faster kind and the weaker promise.

Both are driven with the same window of messages in flight as the other peers.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
USER, PASSWORD = "guest", "guest"  # the default user, which 3.x admits from loopback only
STREAM_BATCH = 64  # messages per stream-protocol publish frame; the window still bounds what is unconfirmed
CONFIRM_TIMEOUT_S = 60.0  # no confirm for this long: the run fails instead of hanging


def available() -> bool:
    return (RABBITMQ_BIN / "rabbitmq-server").exists() and shutil.which("epmd") is not None


class RabbitMQServer:
    """One RabbitMQ node on loopback, in ``root``; a context manager."""

    def __init__(self, root: Path):
        from storage.testing.processes import free_port

        self.root = Path(root)
        self.amqp_port, self.stream_port = free_port(), free_port()
        self.dist_port, self.epmd_port = free_port(), free_port()
        self.node = f"magnetar-bench-{os.getpid()}@localhost"
        self._epmd: subprocess.Popen | None = None
        self._server: subprocess.Popen | None = None

    @property
    def amqp_url(self) -> str:
        return f"amqp://{USER}:{PASSWORD}@127.0.0.1:{self.amqp_port}/"

    def _env(self) -> dict:
        home = self.root / "home"
        for d in (home, self.root / "mnesia", self.root / "log"):
            d.mkdir(parents=True, exist_ok=True)
        config = self.root / "rabbitmq.conf"
        config.write_text("\n".join([
            f"listeners.tcp.1 = 127.0.0.1:{self.amqp_port}",
            f"stream.listeners.tcp.1 = 127.0.0.1:{self.stream_port}",
            # the stream protocol tells clients where the leader is: this name must be reachable
            "stream.advertised_host = 127.0.0.1",
            f"stream.advertised_port = {self.stream_port}",
            "loopback_users.guest = true",
            # the bench writes a few GB on a shared box; the default 50 MB free-disk alarm is kept
            "log.console = false", "log.file.level = warning", ""]))
        (self.root / "enabled_plugins").write_text("[rabbitmq_stream].\n")
        (self.root / "rabbitmq-env.conf").write_text("")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update({
            "HOME": str(home),  # .erlang.cookie goes here, not into the user's home
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.root / "log"),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.root / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.root / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.root / "enabled_plugins"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd_port),
        })
        return env

    def start(self, timeout_s: float = 90.0) -> "RabbitMQServer":
        from storage.testing.waiting import wait_until

        if not available():
            raise RuntimeError("rabbitmq-server is not installed (make rabbitmq installs the Debian package)")
        env = self._env()
        log = open(self.root / "server.out", "wb")
        self._epmd = subprocess.Popen([shutil.which("epmd"), "-address", "127.0.0.1", "-port", str(self.epmd_port)],
                                      env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: _listening(self.epmd_port), 10, "epmd to listen")
        self._server = subprocess.Popen([str(RABBITMQ_BIN / "rabbitmq-server")], env=env, cwd=self.root,
                                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            # the stream listener opens after the broker has booted and the plugin has started
            wait_until(lambda: self._server.poll() is not None or
                       (_listening(self.amqp_port) and _listening(self.stream_port)), timeout_s,
                       "rabbitmq-server to listen on its AMQP and stream ports")
            if self._server.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self._server.returncode}: {self.log_tail()}")
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join((self.root / "server.out").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        for proc in (self._server, self._epmd):
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()  # the node shuts down cleanly on SIGTERM
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def __enter__(self) -> "RabbitMQServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _result(messages: int, body_bytes: int, elapsed: float, **extra) -> dict:
    return {"messages": messages, "message_bytes": body_bytes, "produce_msg_per_s": messages / elapsed,
            "produce_mb_per_s": messages * body_bytes / elapsed / 1e6, **extra}


async def quorum_queue_produce(url: str, messages: int, body_bytes: int, window: int) -> dict:
    """Persistent publishes to a quorum queue, each awaited until its publisher confirm; ``window`` in flight."""
    import aio_pika

    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = f"bench-quorum-{body_bytes}"
        await channel.declare_queue(queue, durable=True, arguments={"x-queue-type": "quorum"})
        exchange = channel.default_exchange
        body = b"x" * body_bytes
        slots = asyncio.Semaphore(window)
        failures: list[BaseException] = []

        async def publish_one() -> None:
            try:
                await exchange.publish(aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                                       routing_key=queue)
            except BaseException as exc:  # a nack or a closed channel: the run is void
                failures.append(exc)
            finally:
                slots.release()

        tasks = []
        start = time.perf_counter()
        for _ in range(messages):
            await slots.acquire()
            tasks.append(asyncio.ensure_future(publish_one()))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
        if failures:
            raise RuntimeError(f"{len(failures)} quorum-queue publishes failed: {failures[0]!r}")
        declared = await channel.declare_queue(queue, durable=True, passive=True)
        stored = declared.declaration_result.message_count
        await channel.queue_delete(queue)  # the next size starts on an empty queue
        return _result(messages, body_bytes, elapsed, stored=stored, window=window)
    finally:
        await connection.close()


async def stream_produce(port: int, messages: int, body_bytes: int, window: int) -> dict:
    """Publishes to a stream over the stream protocol, batched, counting confirms; ``window`` unconfirmed at most."""
    from rstream import Producer

    stream = f"bench-stream-{body_bytes}"
    body = b"x" * body_bytes
    state = {"in_flight": 0, "confirmed": 0, "failed": 0}
    progress = asyncio.Event()

    def on_confirm(status) -> None:
        state["in_flight"] -= 1
        state["confirmed" if status.is_confirmed else "failed"] += 1
        progress.set()

    async with Producer("127.0.0.1", port, username=USER, password=PASSWORD) as producer:
        await producer.create_stream(stream, exists_ok=True)
        sent = 0
        start = time.perf_counter()
        while sent < messages:
            while state["in_flight"] >= window:
                progress.clear()
                await asyncio.wait_for(progress.wait(), CONFIRM_TIMEOUT_S)
            batch = min(window - state["in_flight"], messages - sent, STREAM_BATCH)
            state["in_flight"] += batch
            await producer.send_batch(stream, [body] * batch, on_publish_confirm=on_confirm)
            sent += batch
        while state["confirmed"] + state["failed"] < messages:
            progress.clear()
            await asyncio.wait_for(progress.wait(), CONFIRM_TIMEOUT_S)
        elapsed = time.perf_counter() - start
        await producer.delete_stream(stream)
    if state["failed"]:
        raise RuntimeError(f"{state['failed']} stream publishes were not confirmed")
    return _result(messages, body_bytes, elapsed, window=window, batch=STREAM_BATCH)
