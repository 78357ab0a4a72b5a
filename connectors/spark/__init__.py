"""Magnetar topics as a Spark data source and sink (Spark 4's Python Data Source API).

    from connectors.spark import register
    register(spark)
    stream = (spark.readStream.format("magnetar")
              .option("service.url", "pulsar://localhost:6650")
              .option("admin.url", "http://localhost:8080")
              .option("topic", "events")
              .load())

Options, schema and guarantees: docs/spark.md.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from connectors.spark.options import MagnetarOptionError, parse_sink_options, parse_source_options
from connectors.spark.sink import MagnetarStreamWriter, MagnetarWriter, check_schema
from connectors.spark.source import SCHEMA, DataLossError, MagnetarBatchReader, MagnetarSourceError, MagnetarStreamReader

__all__ = ["DataLossError", "MagnetarDataSource", "MagnetarOptionError", "MagnetarSourceError", "register"]


class MagnetarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        options = parse_source_options(self.options)
        if options.starting == "latest":
            raise MagnetarOptionError("startingOffsets=latest is meaningless in a batch query: use earliest or "
                                      "a JSON of message ids")
        return MagnetarBatchReader(options)

    def streamReader(self, schema):
        if any(k.lower() == "endingoffsets" for k in self.options):
            raise MagnetarOptionError("option 'endingOffsets' applies to batch queries only (spark.read)")
        return MagnetarStreamReader(parse_source_options(self.options))

    def writer(self, schema, overwrite: bool):
        options = parse_sink_options(self.options)
        check_schema(schema, options)
        return MagnetarWriter(options)

    def streamWriter(self, schema, overwrite: bool):
        options = parse_sink_options(self.options)
        check_schema(schema, options)
        return MagnetarStreamWriter(options)


def register(spark) -> None:
    """Make ``format("magnetar")`` available in ``spark`` (a SparkSession)."""
    spark.dataSource.register(MagnetarDataSource)
