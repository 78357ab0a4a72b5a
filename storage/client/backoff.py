"""The client's one retry/backoff shape: capped exponential delays with jitter from an injected rng."""

from __future__ import annotations

import random

from storage.client.config import ClientConfig


class Backoff:
    """Successive delays: initial, initial*multiplier, ... capped at max, each +/- jitter.

    Pure: it computes delays; the caller sleeps (so tests can drive it without time).
    """

    def __init__(self, config: ClientConfig, rng: random.Random):
        self._initial = config.backoff_initial_s
        self._max = config.backoff_max_s
        self._multiplier = config.backoff_multiplier
        self._jitter = config.backoff_jitter
        self._rng = rng
        self._next = self._initial

    def next_delay(self) -> float:
        base = self._next
        self._next = min(self._max, self._next * self._multiplier)
        if self._jitter:
            base *= 1 + self._jitter * (2 * self._rng.random() - 1)
        return base

    def reset(self) -> None:
        self._next = self._initial
