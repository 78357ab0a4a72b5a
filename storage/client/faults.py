"""Scripted faults for the bookie pool (STYLE.md 7): fail the n-th request, hold one, corrupt reads.

A test builds a ``FaultPlan``, passes it in the client context, and scripts
what the next requests to a bookie meet -- no sleeps, no races:

    plan.fail_nth("b1", 3, BookieTimeoutError("scripted"), ops={"add"})
    hold = plan.hold_next("b2", ops={"add"})             # or entry_id=9: only that entry's request
    await hold.reached          # the request is parked
    ...                         # do the thing that must happen "meanwhile"
    hold.release()              # now it goes to the bookie (or hold.fail(exc))
    plan.corrupt_reads("b3")    # READ bodies from b3 come back with a flipped byte

Operations are named ``add``, ``recovery_add``, ``read``, ``fence_read``,
``read_lac`` and ``batch_read``. With no plan the pool does no extra work.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

ADD = "add"
RECOVERY_ADD = "recovery_add"
READ = "read"
FENCE_READ = "fence_read"
READ_LAC = "read_lac"
BATCH_READ = "batch_read"


class Hold:
    """A parked request: ``reached`` resolves when it arrives; release() or fail() lets it go."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.reached: asyncio.Future = loop.create_future()
        self.gate: asyncio.Future = loop.create_future()
        self.request: tuple | None = None  # (bookie_id, op, args) of the held request

    def release(self) -> None:
        if not self.gate.done():
            self.gate.set_result(None)

    def fail(self, exc: BaseException) -> None:
        if not self.gate.done():
            self.gate.set_exception(exc)


@dataclass
class _Rule:
    bookie_id: str | None
    ops: frozenset[str] | None
    skip: int  # matching requests to let through before acting
    times: int | None  # how many to act on (None: forever)
    exc: BaseException | None = None
    hold: Hold | None = None
    corrupt: bool = False
    entry_id: int | None = None  # only requests for this entry (args[1]: ledger, entry, ...)
    hits: int = 0

    def matches(self, bookie_id: str, op: str, args: tuple) -> bool:
        return (
            (self.bookie_id is None or self.bookie_id == bookie_id)
            and (self.ops is None or op in self.ops)
            and (self.entry_id is None or (len(args) > 1 and args[1] == self.entry_id))
        )


@dataclass
class Verdict:
    exc: BaseException | None = None
    hold: Hold | None = None
    corrupt: bool = False


@dataclass
class FaultPlan:
    rules: list[_Rule] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (bookie_id, op) of every request seen

    def fail_nth(self, bookie_id: str | None, n: int, exc: BaseException, ops=None, times: int = 1) -> _Rule:
        """The n-th (1-based, counted from now) matching request fails with ``exc``, then ``times-1`` more."""
        return self._add(_Rule(bookie_id, _ops(ops), n - 1, times, exc=exc))

    def fail_all(self, bookie_id: str | None, exc: BaseException, ops=None) -> _Rule:
        return self._add(_Rule(bookie_id, _ops(ops), 0, None, exc=exc))

    def hold_next(self, bookie_id: str | None, ops=None, nth: int = 1, entry_id: int | None = None) -> Hold:
        hold = Hold()
        self._add(_Rule(bookie_id, _ops(ops), nth - 1, 1, hold=hold, entry_id=entry_id))
        return hold

    def corrupt_reads(self, bookie_id: str, times: int | None = None) -> _Rule:
        return self._add(_Rule(bookie_id, frozenset({READ, BATCH_READ}), 0, times, corrupt=True))

    def remove(self, rule: _Rule) -> None:
        if rule in self.rules:
            self.rules.remove(rule)

    def clear(self) -> None:
        self.rules.clear()

    def _add(self, rule: _Rule) -> _Rule:
        self.rules.append(rule)
        return rule

    def intercept(self, bookie_id: str, op: str, args: tuple) -> Verdict | None:
        self.requests.append((bookie_id, op))
        for rule in self.rules:
            if not rule.matches(bookie_id, op, args):
                continue
            if rule.skip > 0:
                rule.skip -= 1
                continue
            rule.hits += 1
            if rule.times is not None and rule.hits >= rule.times:
                self.rules.remove(rule)
            if rule.hold is not None:
                rule.hold.request = (bookie_id, op, args)
                if not rule.hold.reached.done():
                    rule.hold.reached.set_result((bookie_id, op, args))
            return Verdict(rule.exc, rule.hold, rule.corrupt)
        return None


def _ops(ops) -> frozenset[str] | None:
    if ops is None:
        return None
    if isinstance(ops, str):
        return frozenset({ops})
    return frozenset(ops)


def corrupt(body: bytes) -> bytes:
    """Flip one payload bit (or a header bit of an empty entry) so the digest no longer matches."""
    if not body:
        return b"\x00"
    b = bytearray(body)
    b[-1] ^= 0x01
    return bytes(b)
