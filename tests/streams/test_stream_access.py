"""Which namespace grants open which Stream API call: the table of broker/streams/security.py through the
authorization rule (pure, no broker)."""

import pytest

from broker.security.authorization import Grants, allows
from broker.streams.security import STREAM_ACCESS

SUPERS = ("root",)
ADMINS = frozenset({"admin"})


def grants(actions: tuple[str, ...]) -> Grants:
    return Grants(admin_roles=ADMINS, namespace_actions={"app": set(actions)})


@pytest.mark.parametrize("rpc, actions, allowed", [
    ("Write", ("produce",), True),
    ("Write", ("consume",), False),
    ("CreateStream", ("produce",), True),
    ("CreateStream", ("consume",), False),
    ("Truncate", ("produce",), True),
    ("Truncate", ("consume",), False),
    ("Read", ("consume",), True),
    ("Read", ("produce",), False),
    ("GetStreamInfo", ("consume",), True),
    ("GetStreamInfo", ("produce",), True),
    ("GetStreamInfo", (), False),
    ("ListStreams", ("produce",), True),
    ("GetNamespace", ("consume",), True),
    ("GetNamespace", (), False),
    ("DeleteStream", ("produce", "consume"), False),
    ("CreateNamespace", ("produce", "consume"), False),
    ("DeleteNamespace", ("produce", "consume"), False),
    ("ListNamespaces", ("produce", "consume"), False),
])
def test_a_granted_role(rpc, actions, allowed):
    need, _ = STREAM_ACCESS[rpc]
    assert allows("app", need, SUPERS, grants(actions)) is allowed


@pytest.mark.parametrize("rpc", sorted(STREAM_ACCESS))
def test_tenant_admins_and_superusers_may_call_everything_and_the_anonymous_nothing(rpc):
    need, _ = STREAM_ACCESS[rpc]
    assert allows("admin", need, SUPERS, grants(()))
    assert allows("root", need, SUPERS, grants(()))
    assert not allows(None, need, SUPERS, grants(("produce", "consume")))
