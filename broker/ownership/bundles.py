"""A namespace's bundles as pure arithmetic: the boundaries that cut its topic-hash space, and splitting.

A topic hashes (CRC32 of its full name; each partition separately) into
0..2^32. A namespace's bundles are the ranges between consecutive
``boundaries``, ``[lo, hi)``, the first starting at 0 and the last ending at
2^32. A bundle is named ``0xLO_0xHI`` as in Pulsar, which writes the upper
bound of the last bundle as ``0xffffffff``. A new namespace has
``default_number_of_namespace_bundles`` equal ranges; a split
(Pulsar's ``range_equally_divide``) cuts one bundle at its midpoint, so the
boundaries only ever gain points. No I/O here: broker/ownership/ownership.py stores the
boundaries and decides who owns each bundle.
"""

from __future__ import annotations

import bisect
import re
import zlib
from dataclasses import dataclass

from broker.errors import InvalidBundleError
from magnetar.topic_name import TopicName

HASH_SPACE = 1 << 32
FULL_UPPER = 0xFFFFFFFF  # how Pulsar writes the upper bound of the last bundle
SPLIT_ALGORITHMS = ("range_equally_divide",)
_NAME = re.compile(r"^0x([0-9a-fA-F]{1,8})_0x([0-9a-fA-F]{1,8})$")

BundleRange = tuple[int, int]


def topic_hash(topic: TopicName) -> int:
    return zlib.crc32(str(topic).encode()) & 0xFFFFFFFF


def _hex(bound: int) -> str:
    return f"0x{min(bound, FULL_UPPER):08x}"


def bundle_name(bundle: BundleRange) -> str:
    return f"{_hex(bundle[0])}_{_hex(bundle[1])}"


def _bound(text: str) -> int:
    value = int(text, 16)
    return HASH_SPACE if value == FULL_UPPER else value


def parse_bundle_name(name: str) -> BundleRange:
    """``0xLO_0xHI`` -> (lo, hi). Raises InvalidBundleError saying what is wrong."""
    m = _NAME.match(name)
    if m is None:
        raise InvalidBundleError(f"invalid bundle {name!r}: expected 0xLO_0xHI with 8-digit hex bounds, "
                                 "e.g. 0x00000000_0x40000000")
    lo, hi = int(m.group(1), 16), _bound(m.group(2))
    if lo >= hi:
        raise InvalidBundleError(f"invalid bundle {name!r}: the lower bound must be below the upper bound")
    return lo, hi


@dataclass(frozen=True)
class NamespaceBundles:
    """Strictly increasing boundaries from 0 to 2^32; bundle i is [boundaries[i], boundaries[i + 1])."""

    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.boundaries
        if len(b) < 2 or b[0] != 0 or b[-1] != HASH_SPACE or any(x >= y for x, y in zip(b, b[1:])):
            raise InvalidBundleError(f"invalid bundle boundaries {[_hex(x) for x in b]}: they must rise strictly "
                                     "from 0x00000000 to 0xffffffff")

    @classmethod
    def equal(cls, count: int) -> "NamespaceBundles":
        """``count`` equal ranges (the default for a new namespace)."""
        if count < 1:
            raise InvalidBundleError(f"a namespace needs at least 1 bundle, got {count}")
        step = HASH_SPACE // count
        return cls(tuple(i * step for i in range(count)) + (HASH_SPACE,))

    @classmethod
    def from_json(cls, doc: dict) -> "NamespaceBundles":
        """Pulsar's BundlesData: ``{"boundaries": ["0x00000000", ..., "0xffffffff"], "numBundles": N}``."""
        try:
            bounds = tuple(_bound(text.removeprefix("0x")) for text in doc["boundaries"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidBundleError(f"invalid bundles document {doc!r}: {exc}") from exc
        bundles = cls(bounds)
        if doc.get("numBundles", len(bundles)) != len(bundles):
            raise InvalidBundleError(f"invalid bundles document: numBundles {doc['numBundles']} but "
                                     f"{len(bundles)} ranges")
        return bundles

    @classmethod
    def requested(cls, doc, maximum: int) -> "NamespaceBundles":
        """The bundles asked for when a namespace is created: Pulsar's BundlesData with boundaries, or with
        ``numBundles`` alone for that many equal ranges (``pulsar-admin namespaces create --bundles N``)."""
        if not isinstance(doc, dict):
            raise InvalidBundleError(f"invalid bundles document {doc!r}: expected an object with numBundles "
                                     "or boundaries")
        if "boundaries" in doc:
            bundles = cls.from_json(doc)
        else:
            count = doc.get("numBundles")
            if not isinstance(count, int) or isinstance(count, bool):
                raise InvalidBundleError(f"invalid bundles document {doc!r}: numBundles must be a whole number")
            bundles = cls.equal(count)
        if len(bundles) > maximum:
            raise InvalidBundleError(f"{len(bundles)} bundles asked for; a namespace may have at most {maximum} "
                                     "(load_balancer_namespace_maximum_bundles)")
        return bundles

    def to_json(self) -> dict:
        return {"boundaries": [_hex(b) for b in self.boundaries], "numBundles": len(self)}

    def __len__(self) -> int:
        return len(self.boundaries) - 1

    def ranges(self) -> list[BundleRange]:
        b = self.boundaries
        return [(b[i], b[i + 1]) for i in range(len(b) - 1)]

    def names(self) -> list[str]:
        return [bundle_name(r) for r in self.ranges()]

    def bundle_of(self, topic: TopicName) -> BundleRange:
        i = bisect.bisect_right(self.boundaries, topic_hash(topic)) - 1
        return self.boundaries[i], self.boundaries[i + 1]

    def __contains__(self, bundle: BundleRange) -> bool:
        i = bisect.bisect_left(self.boundaries, bundle[0])
        return i + 1 < len(self.boundaries) and self.boundaries[i] == bundle[0] and self.boundaries[i + 1] == bundle[1]

    def split(self, bundle: BundleRange) -> tuple["NamespaceBundles", BundleRange, BundleRange]:
        """Cut ``bundle`` at its midpoint (Pulsar's range_equally_divide, upper bound as written):
        (new bundles, lower half, upper half). Raises InvalidBundleError if it is not a bundle here or too small."""
        if bundle not in self:
            raise InvalidBundleError(f"{bundle_name(bundle)} is not one of the bundles {self.names()}")
        lo, hi = bundle
        mid = lo + (min(hi, FULL_UPPER) - lo) // 2
        if mid <= lo:
            raise InvalidBundleError(f"bundle {bundle_name(bundle)} is too small to split")
        return NamespaceBundles(tuple(sorted(self.boundaries + (mid,)))), (lo, mid), (mid, hi)
