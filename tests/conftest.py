"""Shared fixtures live in tests/fixtures/; register each module here."""

pytest_plugins = [
    "tests.fixtures.zookeeper",
    "tests.fixtures.cluster",
    "tests.fixtures.broker",
]
