"""A child of the multi-process standalone (broker/workers.py): `python -m broker.worker_child NAME`.

It reads what to run -- ("bookie" | "broker", its config, the supervisor's pid, the log level) -- pickled on
stdin from the supervisor, then serves exactly as `bookie start` or `broker start` would, printing their ready
line on stdout (the supervisor relays it and waits for it).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import pickle
import signal
import sys


PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux for SIGKILL when the supervisor dies; if it already has, stop now.

    SIGKILL, not SIGTERM: with the supervisor gone the metadata store is gone, so a graceful stop could release
    nothing and would wait on the store; a crash loses nothing acknowledged (bookies acknowledge after fsync,
    metadata is written through), and kill -9 of any part is a fault the system is built to survive."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the supervisor's own stop is the only guarantee
        pass
    if os.getppid() != parent_pid:
        sys.exit(1)


def child_main(name: str) -> int:
    kind, config, parent_pid, log_level = pickle.loads(sys.stdin.buffer.read())
    _die_with_parent(parent_pid)
    logging.basicConfig(level=log_level.upper(),
                        format=f"%(asctime)s %(levelname)s [{name}] %(name)s: %(message)s")
    from broker.cli import _serve, _use_uvloop
    from storage.large_buffers import keep_large_buffers

    _use_uvloop()
    keep_large_buffers()
    if kind == "bookie":
        from storage.bookie.cli import _serve as serve_bookie

        return asyncio.run(serve_bookie([config], standalone=False))
    return asyncio.run(_serve(config, None, None))


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1]))
