"""Connectors from Magnetar topics to other systems (``connectors.spark``: a Spark data source and sink)."""
