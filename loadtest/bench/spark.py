"""Spark suite: a streaming query drains a backlog from ``format("magnetar")`` in local[2].

The figure is rows/s from the query's start to the end of its last micro-batch, with every row going to
Spark's ``noop`` sink. The reference, in the same run and the same session, is Spark's own
``rate-micro-batch`` source into the same sink: what the engine does with a source that costs nothing.

Each is measured twice. The first ("cold") query of the session pays once for what a long-running query pays
only at its start: Spark's Python workers are started and import pyspark, pyarrow and the connector (and the JVM
compiles its code paths). The second ("warm") query drains a second backlog of the same size on another topic
with the workers already running, as every micro-batch after the first of a streaming query does.
"""

from __future__ import annotations

import os
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


def magnetar_stream(spark, deployment, topic: str) -> dict:
    frame = (spark.readStream.format("magnetar").option("service.url", deployment.broker.service_url)
             .option("admin.url", deployment.broker.web_url).option("topic", topic)
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
    spark = _session()
    try:
        topics = [f"persistent://public/default/bench-spark-{time.time_ns()}-{i}" for i in range(2)]
        written = [produce_backlog(deployment.broker.service_url, topic, backlog) for topic in topics]
        ours = magnetar_stream(spark, deployment, topics[0])
        reference = rate_stream(spark, backlog)
        warm = {"magnetar_source": magnetar_stream(spark, deployment, topics[1]),
                "rate_source": rate_stream(spark, backlog)}
    finally:
        spark.stop()
        deployment.stop()
    warm["ratio"] = warm["magnetar_source"]["rows_per_s"] / warm["rate_source"]["rows_per_s"]
    results = {
        "magnetar_source": ours, "rate_source": reference, "ratio": ours["rows_per_s"] / reference["rows_per_s"],
        "warm": warm, "produce": written[0],
        "config": {"backlog": backlog, "message_bytes": MESSAGE_BYTES, "spark_master": "local[2]", "sink": "noop",
                   "quick": quick, "pyspark_zip_bytecode": _zip_has_bytecode()},
    }
    rows = []
    for label, r in (("cold", results), ("warm", warm)):
        m, ref = r["magnetar_source"], r["rate_source"]
        rows += [{"query": label, "source": "magnetar (backlog drain)", "rows": m["rows"], "seconds": m["seconds"],
                  "rows/s": m["rows_per_s"]},
                 {"query": label, "source": "rate-micro-batch (reference)", "rows": ref["rows"],
                  "seconds": ref["seconds"], "rows/s": ref["rows_per_s"]},
                 {"query": label, "source": "ratio magnetar / rate", "rows/s": r["ratio"]}]
    print_table("Spark structured streaming, local[2], noop sink", rows, ["query", "source", "rows", "seconds", "rows/s"])
    return results


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
