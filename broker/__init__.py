"""The Magnetar broker: Pulsar binary protocol, topics as managed ledgers, subscriptions, admin HTTP."""
