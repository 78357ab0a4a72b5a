"""Who owns each namespace bundle, and every action that moves one: acquire, take over, split and unload.

``bundles`` is the pure arithmetic of a namespace's hash ranges (names, lookup of a topic's bundle, the midpoint
cut of a split); ``ownership`` holds the ephemeral ownership nodes and runs the split's metadata steps;
``takeover`` is the pure verdict on an owner proven dead; ``load_manager`` runs the automatic split and the
load-shedding unloads that the pure decisions of ``broker.loadbalance`` choose. The loops live here, not in
``loadbalance``, because they act through ownership and ownership asks ``loadbalance`` which broker takes an
unowned bundle: this way the dependency runs one way (``ownership`` -> ``loadbalance``).

``resources`` (tenants, namespace policies, partitioned-topic metadata and the stored bundle boundaries) is
here too, although the admin REST and topic loading read it as well: it stores ``bundles`` values and
``ownership`` reads the boundaries from it, so outside this package the two would import each other
(tests/test_architecture.py fails on that cycle).
"""
