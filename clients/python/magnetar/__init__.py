"""magnetar: the pure-Python Pulsar-protocol client (wire codec in magnetar.protocol)."""
