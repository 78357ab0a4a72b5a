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
from connectors.spark.schemas import SchemaExpansionError, expanded_arrow_schema, topic_schema
from connectors.spark.sink import MagnetarStreamWriter, MagnetarWriter, check_schema
from connectors.spark.source import SCHEMA, DataLossError, MagnetarBatchReader, MagnetarSourceError, MagnetarStreamReader

__all__ = ["DataLossError", "MagnetarDataSource", "MagnetarOptionError", "MagnetarSourceError", "SchemaExpansionError",
           "register"]


class MagnetarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self):
        if not any(k.lower() == "expandschema" for k in self.options):
            return SCHEMA
        value_schema = self._value_schema(parse_source_options(self.options))
        if value_schema is None:
            return SCHEMA
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(expanded_arrow_schema(value_schema))

    def _value_schema(self, options) -> dict | None:
        """The topic's schema when ``expandSchema`` is on (read once per data source object)."""
        if not options.expand_schema:
            return None
        if getattr(self, "_expanded", None) is None:
            self._expanded = topic_schema(options)
        return self._expanded

    def reader(self, schema):
        options = parse_source_options(self.options)
        if options.starting == "latest":
            raise MagnetarOptionError("startingOffsets=latest is meaningless in a batch query: use earliest or "
                                      "a JSON of message ids")
        return MagnetarBatchReader(options, self._value_schema(options))

    def streamReader(self, schema):
        if any(k.lower() == "endingoffsets" for k in self.options):
            raise MagnetarOptionError("option 'endingOffsets' applies to batch queries only (spark.read)")
        options = parse_source_options(self.options)
        return MagnetarStreamReader(options, self._value_schema(options))

    def writer(self, schema, overwrite: bool):
        options = parse_sink_options(self.options)
        return MagnetarWriter(options, check_schema(schema, options))

    def streamWriter(self, schema, overwrite: bool):
        options = parse_sink_options(self.options)
        return MagnetarStreamWriter(options, check_schema(schema, options))


def register(spark) -> None:
    """Make ``format("magnetar")`` available in ``spark`` (a SparkSession)."""
    spark.dataSource.register(MagnetarDataSource)
