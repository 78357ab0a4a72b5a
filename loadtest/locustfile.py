"""Locust load test for Magnetar, built on the `magnetar` client.

    locust -f loadtest/locustfile.py --headless -u 50 -r 10 -t 60s --csv results/run --service-url pulsar://127.0.0.1:6650

How it is bridged: locust runs users as gevent greenlets; the magnetar client is asyncio. One asyncio event
loop runs in a real OS thread (gevent's original ``threading``, so monkey-patching does not turn it into a
greenlet); a greenlet submits a coroutine there and sleeps on a gevent event that the asyncio thread sets
through a gevent async watcher. No greenlet blocks the gevent hub and no locust work runs on the asyncio loop.

Every publish is reported to locust as a request ("publish", its latency to the broker's receipt); every
consumed message as a "consume" event whose response time is its end-to-end latency (publish timestamp in
the message to receipt by the consumer).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import gevent
import gevent.event
from gevent import monkey
from locust import User, between, events, task

_Thread = monkey.get_original("threading", "Thread")
_loop: asyncio.AbstractEventLoop | None = None


def _event_loop() -> asyncio.AbstractEventLoop:
    """The process's one asyncio loop, on a real OS thread."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
        _Thread(target=_loop.run_forever, name="magnetar-asyncio", daemon=True).start()
    return _loop


def run(coro):
    """Run a coroutine on the asyncio loop; the calling greenlet yields to others while it waits.

    The asyncio thread wakes the greenlet through a gevent async watcher (the one thread-safe way into the
    hub), so waiting costs no thread-pool slot however many users wait at once."""
    watcher = gevent.get_hub().loop.async_()
    done = gevent.event.Event()
    watcher.start(done.set)
    try:
        future = asyncio.run_coroutine_threadsafe(coro, _event_loop())
        future.add_done_callback(lambda _: watcher.send())
        done.wait()
    finally:
        watcher.close()
    return future.result()


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650", help="Magnetar broker URL")
    parser.add_argument("--topic-prefix", default="persistent://public/default/locust", help="topics are <prefix>-<i>")
    parser.add_argument("--topics", type=int, default=4, help="number of topics the users spread over")
    parser.add_argument("--message-size", type=int, default=100, help="payload bytes")
    parser.add_argument("--batching", choices=("on", "off"), default="on")
    parser.add_argument("--subscription-type", choices=("Exclusive", "Shared", "Failover", "KeyShared"), default="Shared")
    parser.add_argument("--produce-rate", type=float, default=10.0, help="messages per second per user")


class MagnetarUser(User):
    """Each user owns a producer and a consumer on one topic of the set."""

    wait_time = between(0, 0)

    def on_start(self) -> None:
        from magnetar.asyncio import Client, ConsumerType

        opts = self.environment.parsed_options
        self.topic = f"{opts.topic_prefix}-{hash(uuid.uuid4()) % opts.topics}"
        self.body = b"x" * max(opts.message_size - 8, 0)
        self.interval_s = 1.0 / opts.produce_rate if opts.produce_rate > 0 else 0.0
        self.client = Client(opts.service_url, operation_timeout_seconds=30)
        self.producer = run(self.client.create_producer(self.topic, batching_enabled=opts.batching == "on",
                                                        batching_max_publish_delay_ms=1))
        self.consumer = run(self.client.subscribe(self.topic, "locust", consumer_type=getattr(ConsumerType, opts.subscription_type)))
        self.consume_loop = gevent.spawn(self._consume)

    def _consume(self) -> None:
        while True:
            try:
                msgs = run(self.consumer.batch_receive(100, 1000))
            except Exception:  # a timeout with nothing to read: try again
                continue
            now = time.time()
            for msg in msgs:
                sent = float(msg.properties().get("sent", now))
                events.request.fire(request_type="magnetar", name="consume", response_time=(now - sent) * 1000,
                                    response_length=len(msg.data()), exception=None, context={})
                run(self.consumer.acknowledge(msg))

    @task
    def publish(self) -> None:
        start = time.perf_counter()
        exception = None
        try:
            run(self.producer.send(self.body, properties={"sent": repr(time.time())}))
        except Exception as exc:  # reported to locust as a failed request
            exception = exc
        events.request.fire(request_type="magnetar", name="publish", response_time=(time.perf_counter() - start) * 1000,
                            response_length=len(self.body), exception=exception, context={})
        if self.interval_s:
            gevent.sleep(max(0.0, self.interval_s - (time.perf_counter() - start)))  # the user's produce rate

    def on_stop(self) -> None:
        self.consume_loop.kill()
        run(self.client.close())
