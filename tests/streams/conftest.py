"""Stream API tests: a unique namespace and stream name per test, and an asyncio client on a broker."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def names(request) -> tuple[str, str]:
    """(namespace, stream) of this test's own."""
    tag = uuid.uuid4().hex[:8]
    return f"public/ns-{tag}", f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{tag}"
