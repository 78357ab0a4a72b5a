"""Autorecovery configuration: the bookie's autorecovery fields, also loadable on their own.

``bookie start`` runs autorecovery inside the bookie with the fields of its
``BookieConfig``; ``bookie autorecovery`` runs it alone and reads the same
``MAGNETAR_BOOKIE_<FIELD>`` variables and flags (only these fields).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Mapping

from storage.config import load_layered

_ENV_PREFIX = "MAGNETAR_BOOKIE_"


@dataclass(frozen=True)
class AutoRecoveryConfig:
    lost_bookie_recovery_delay_s: float = 60.0
    open_ledger_rereplication_grace_period_s: float = 30.0
    auditor_periodic_check_interval_s: float = 86_400.0
    replication_poll_interval_s: float = 1.0
    session_timeout_s: float = 10.0
    copy_window_entries: int = 256  # entries in flight per fragment copy

    def validate(self) -> "AutoRecoveryConfig":
        if self.lost_bookie_recovery_delay_s < 0 or self.open_ledger_rereplication_grace_period_s < 0:
            raise ValueError("lost_bookie_recovery_delay_s and open_ledger_rereplication_grace_period_s must be >= 0")
        if self.auditor_periodic_check_interval_s <= 0 or self.replication_poll_interval_s <= 0:
            raise ValueError("auditor_periodic_check_interval_s and replication_poll_interval_s must be > 0")
        if not 1 <= self.copy_window_entries <= 10_000:
            raise ValueError("copy_window_entries must be in 1..10000")
        return self

    @classmethod
    def from_bookie(cls, bookie_config) -> "AutoRecoveryConfig":
        """The autorecovery fields of a BookieConfig."""
        return cls(**{f.name: getattr(bookie_config, f.name) for f in fields(cls) if hasattr(bookie_config, f.name)}
                   ).validate()

    @property
    def tick_s(self) -> float:
        """How often the auditor looks at its clock: often enough for a short delay, never busy."""
        return min(1.0, max(0.05, self.lost_bookie_recovery_delay_s / 4))


def load_autorecovery_config(overrides: Mapping[str, Any] | None = None,
                             environ: Mapping[str, str] | None = None) -> AutoRecoveryConfig:
    """Defaults < MAGNETAR_BOOKIE_<FIELD> env (this config's fields only) < overrides."""
    known = {f.name for f in fields(AutoRecoveryConfig)}
    env = environ if environ is not None else os.environ
    mine = {k: v for k, v in env.items() if k.startswith(_ENV_PREFIX) and k[len(_ENV_PREFIX):].lower() in known}
    return load_layered(AutoRecoveryConfig, section="autorecovery", env_prefix=_ENV_PREFIX,
                        overrides=overrides, environ=mine)
