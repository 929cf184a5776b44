"""Busy processes that keep the CPUs loaded while the suite runs (``run_all.py --load N``).

Each burner is a plain Python process spinning at niceness 0. The suite stops them when
it ends, fails or is interrupted; a burner whose parent dies without stopping it (for
instance on ``kill -9``) notices within a fraction of a second and exits on its own::

    from bench.load import Burners

    with Burners(2) as load:
        print(load.pids)  # two busy processes until the block ends
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType, TracebackType

# spin, and leave once the parent is gone (the burner is re-parented then)
BURN = """
import os, sys, time
parent = int(sys.argv[1])
while os.getppid() == parent:
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        pass
"""
STOP_WAIT_S = 5.0


class Burners:
    """``count`` CPU-burning child processes for the lifetime of a ``with`` block.

    A SIGTERM to this process while the block runs is turned into ``SystemExit`` so
    the block still stops its burners; Ctrl-C already raises ``KeyboardInterrupt``.

    >>> with Burners(0) as load:
    ...     load.pids
    []
    """

    def __init__(self, count: int) -> None:
        if count < 0:
            raise ValueError(f"--load must be 0 or more busy processes, got {count}")
        self.count = count
        self.processes: list[subprocess.Popen[bytes]] = []
        self._previous_sigterm: signal.Handlers | object | None = None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def __enter__(self) -> Burners:
        if self.count:
            self._previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            for _ in range(self.count):
                self.processes.append(
                    subprocess.Popen(
                        [sys.executable, "-c", BURN, str(os.getpid())],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                    )
                )
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Terminate every burner and wait for it; kill one that does not leave in time."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)  # type: ignore[arg-type]
            self._previous_sigterm = None


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
