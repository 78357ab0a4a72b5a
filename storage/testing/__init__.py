"""What tests, the cluster launcher and the benchmarks share to drive real processes (as trio ships ``trio.testing``).

* ``storage.testing.processes``: start, kill -9, pause, resume and restart bookie and broker processes
  through their real CLIs on free loopback ports, with readiness by ``/health``;
* ``storage.testing.zookeeper``: a real ZooKeeper server (the Debian package) on a free port;
* ``storage.testing.waiting``: ``wait_until`` / ``wait_until_async``, the one way to wait for a
  condition with a deadline.

Why under ``storage``: none of it imports the server code. Processes start by subprocess (launching
``broker`` is not an import of it), so the package needs nothing above the storage layer, and every
layer that may import ``storage`` can use it: ``tests``, and ``loadtest`` (which DESIGN.md lets start
servers only through their CLIs). It imports nothing else of ``storage``, and nothing shipped but ``loadtest``
imports it (tests/test_architecture.py checks both).
"""
