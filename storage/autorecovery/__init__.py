"""Autorecovery: an elected auditor finds ledgers with lost or bad replicas, and replication workers repair them."""
