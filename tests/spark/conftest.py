"""One local[2] Spark session for the whole test run, with ``format("magnetar")`` registered."""

from __future__ import annotations

import os
import sys

import pytest

from storage.testing.processes import BrokerProcess
from tests.official_client.support import admin_call


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    from connectors.spark import register

    # Spark's Python workers must run in this venv, and on loopback like every test service.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (SparkSession.builder.master("local[2]").appName("magnetar-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """The module's broker, with retention checked every second (the periodic pass deletes consumed ledgers)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("standalone") / "data", env={"MAGNETAR_BROKER_MAINTENANCE_INTERVAL_S": "1"})
    broker.start(timeout_s=60)
    yield broker
    broker.stop()


@pytest.fixture
def magnetar_format(spark, standalone):
    """``magnetar_format(stream=True, **options)``: a reader of format("magnetar") aimed at the standalone broker."""

    def make(stream: bool = True, **options):
        reader = (spark.readStream if stream else spark.read).format("magnetar")
        reader = reader.option("service.url", standalone.service_url).option("admin.url", standalone.web_url)
        for key, value in options.items():
            reader = reader.option(key, str(value))
        return reader.load()

    return make


@pytest.fixture
def partitioned(standalone, topic):
    """``topic`` created as a partitioned topic of 3 partitions."""
    status, body = admin_call(standalone, "PUT", f"/admin/v2/{topic.replace('://', '/')}/partitions", 3)
    assert status == 204, body
    return topic
