"""Shared fixtures live in tests/fixtures/; register each module here."""

# Imported up front: hypothesis's pytest plugin otherwise imports it lazily in the terminal summary, where
# CPython 3.11.7's AST validator trips over a recursion-depth mismatch once client threads have run.
import hypothesis  # noqa: F401

pytest_plugins = [
    "tests.fixtures.zookeeper",
    "tests.fixtures.cluster",
    "tests.fixtures.broker",
    "tests.fixtures.security",
]
