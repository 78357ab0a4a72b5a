"""Spark suite: a streaming query drains a backlog from ``format("magnetar")`` in local[2].

The figure is rows/s from the query's start to the end of its last micro-batch, with every row going to
Spark's ``noop`` sink. The reference is Spark's own ``rate-micro-batch`` source into the same sink: what the
engine does with a source that costs nothing.

Each source runs in a driver process of its own, with a fresh SparkSession (and so a fresh JVM), started the
same way and measured the same way; the session's start is left out of both. In it the source is measured
twice:

- "cold": the session's first query. It pays once for what a long-running query pays only at its start. For
  both sources the JVM loads and compiles the streaming engine's code paths; for ours Spark also starts its
  Python processes, which import pyspark, pyarrow and the connector.
- "warm": a second query in the same session, on a second backlog of the same size, with all of that done, as
  every micro-batch after the first of a streaming query.

Until 2026-11-25 both sources ran in one session, ours first: our cold query also paid the JVM's first-query
costs, which the reference, run after it, did not (measured: the rate source alone in a fresh session took
17.1 s for what it drained in 4.4 s once warm). The reference now runs before the backlogs are written, so that
the broker's after-effects of the writes (flushes, rollovers) can slow only our source, never the reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadtest.bench.broker import MESSAGE_BYTES, _Deployment
from loadtest.bench.report import print_table


def _session():
    from pyspark.sql import SparkSession

    from connectors.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master("local[2]").appName("magnetar-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _drain(query) -> dict:
    start = time.perf_counter()
    try:
        query.processAllAvailable()
        elapsed = time.perf_counter() - start
        rows = sum(p["numInputRows"] for p in query.recentProgress)
    finally:
        query.stop()
    return {"rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed}


def magnetar_stream(spark, service_url: str, admin_url: str, topic: str) -> dict:
    frame = (spark.readStream.format("magnetar").option("service.url", service_url)
             .option("admin.url", admin_url).option("topic", topic)
             .option("subscription", "bench").option("minPartitions", 2).load())  # both cores read
    return _drain(frame.writeStream.format("noop").start())


def rate_stream(spark, rows: int, batches: int = 10) -> dict:
    """Spark's rate-micro-batch source: ``batches`` micro-batches of ``rows / batches`` rows."""
    frame = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows // batches)
             .option("numPartitions", 2).load())
    query = frame.writeStream.format("noop").trigger(processingTime="0 seconds").start()
    start = time.perf_counter()
    try:
        while sum(p["numInputRows"] for p in query.recentProgress) < rows:
            query.awaitTermination(0.05)  # polls the query's own progress; returns early only on failure
        elapsed = time.perf_counter() - start
        done = sum(p["numInputRows"] for p in query.recentProgress)
    finally:
        query.stop()
    return {"rows": done, "seconds": elapsed, "rows_per_s": done / elapsed}


def run(quick: bool = False) -> dict:
    backlog = 50_000 if quick else 1_000_000
    root = Path(tempfile.mkdtemp(prefix="magnetar-bench-spark-"))
    deployment = _Deployment(root, cluster=False)
    try:
        # The reference first, before the backlogs are written: right after 2,000,000 messages the broker and
        # bookies are still busy for a while, and that must not slow the reference and flatter our ratio.
        reference = _in_fresh_session(["rate", str(backlog)])
        topics = [f"persistent://public/default/bench-spark-{time.time_ns()}-{i}" for i in range(2)]
        written = [produce_backlog(deployment.broker.service_url, topic, backlog) for topic in topics]
        ours = _in_fresh_session(["magnetar", deployment.broker.service_url, deployment.broker.web_url, *topics])
    finally:
        deployment.stop()
    pairs = {key: {"magnetar_source": ours[key], "rate_source": reference[key],
                   "ratio": ours[key]["rows_per_s"] / reference[key]["rows_per_s"]} for key in ("cold", "warm")}
    results = {**pairs["cold"], "warm": pairs["warm"], "produce": written[0]}
    results["config"] = {"backlog": backlog, "message_bytes": MESSAGE_BYTES, "spark_master": "local[2]",
                         "sink": "noop", "quick": quick, "sessions": "one fresh driver process per source",
                         "pyspark_zip_bytecode": _zip_has_bytecode()}
    rows = []
    for label, r in (("cold", results), ("warm", results["warm"])):
        m, ref = r["magnetar_source"], r["rate_source"]
        rows += [{"query": label, "source": "magnetar (backlog drain)", "rows": m["rows"], "seconds": m["seconds"],
                  "rows/s": m["rows_per_s"]},
                 {"query": label, "source": "rate-micro-batch (reference)", "rows": ref["rows"],
                  "seconds": ref["seconds"], "rows/s": ref["rows_per_s"]},
                 {"query": label, "source": "ratio magnetar / rate", "rows/s": r["ratio"]}]
    print_table("Spark structured streaming, local[2], noop sink", rows, ["query", "source", "rows", "seconds", "rows/s"])
    return results


_RESULT_MARK = "bench-spark-result: "


def _in_fresh_session(args: list[str]) -> dict:
    """Runs ``_measure`` in a new driver process (a new SparkSession and JVM) and returns its cold and warm figures."""
    done = subprocess.run([sys.executable, "-m", "loadtest.bench.spark", *args], capture_output=True, text=True,
                          timeout=1800, cwd=Path(__file__).resolve().parents[2])
    lines = [line for line in done.stdout.splitlines() if line.startswith(_RESULT_MARK)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the {args[0]} source's driver failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1][len(_RESULT_MARK):])


def _measure(args: list[str]) -> dict:
    """In this process: a fresh session, then the source's cold query and its warm one."""
    spark = _session()
    try:
        if args[0] == "rate":
            backlog = int(args[1])
            out = {"cold": rate_stream(spark, backlog), "warm": rate_stream(spark, backlog)}
        else:
            service_url, admin_url, cold_topic, warm_topic = args[1:5]
            out = {"cold": magnetar_stream(spark, service_url, admin_url, cold_topic),
                   "warm": magnetar_stream(spark, service_url, admin_url, warm_topic)}
    finally:
        spark.stop()
    for query in out.values():
        query["driver_pid"] = os.getpid()  # the report can show that each source had a session of its own
    return out


def produce_backlog(url: str, topic: str, messages: int) -> dict:
    """The backlog, written with batching before the query starts (the produce figure itself is the broker suite's)."""
    import pulsar

    client = pulsar.Client(url, operation_timeout_seconds=60)
    try:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                          batching_max_publish_delay_ms=5, max_pending_messages=50_000,
                                          block_if_queue_full=True, send_timeout_millis=0)
        body = b"x" * MESSAGE_BYTES
        start = time.perf_counter()
        for _ in range(messages):
            producer.send_async(body, None)
        producer.flush()
        return {"messages": messages, "seconds": time.perf_counter() - start}
    finally:
        client.close()


def _zip_has_bytecode() -> bool:
    """Whether Spark's Python processes import pyspark from bytecode (connectors/spark/pyspark_zip.py, run by
    `make venv`) or compile it at every start: the cold figure depends on it."""
    import zipfile

    from connectors.spark.pyspark_zip import pyspark_zip

    path = pyspark_zip()
    return path.exists() and "pyspark/worker.pyc" in zipfile.ZipFile(path).namelist()


if __name__ == "__main__":
    print(_RESULT_MARK + json.dumps(_measure(sys.argv[1:])), flush=True)
