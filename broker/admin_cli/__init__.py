"""`magnetar-admin`: the pulsar-admin command line (tenants, clusters, brokers, bookies, namespaces, topics) over the broker's admin REST."""
