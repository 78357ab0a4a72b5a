"""Pure load-balancing decisions from load reports: which broker takes a bundle, which bundles to split, which to shed.

``broker_choice`` holds the load reports brokers publish, their samplers and the choice of broker for an
unowned bundle; ``auto_split`` picks the bundles over the split thresholds; ``load_shedding`` picks the bundles
the leader unloads. Nothing here does I/O or imports ``broker.ownership``, which acts on these decisions
(``broker/ownership/load_manager.py``).
"""
