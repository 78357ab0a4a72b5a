"""The one place tests (and the cluster launcher) start real processes: ZooKeeper, bookies, brokers."""
