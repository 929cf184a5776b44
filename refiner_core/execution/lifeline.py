"""Worker processes that end with their launcher.

A worker asks the kernel to send it SIGTERM when the process that started it dies
(``PR_SET_PDEATHSIG`` on Linux), and on every platform watches its parent id: once
the launcher is gone the worker is re-parented, sends itself SIGTERM (its running
shard unwinds and removes its temporary files) and, if it is still there after a
grace period, exits at once.

Example:
    >>> import os
    >>> watch = ParentWatch(os.getppid(), poll_s=0.05)
    >>> watch.parent_alive()
    True
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1
POLL_S = 0.5
GRACE_S = 10.0


def die_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent dies (``True`` if set)."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        # the process's own symbols include libc's (find_library would run ldconfig)
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    return False


class ParentWatch:
    """A daemon thread that ends this process once ``parent_pid`` is no longer its parent."""

    def __init__(self, parent_pid: int, *, poll_s: float = POLL_S, grace_s: float = GRACE_S):
        self.parent_pid = parent_pid
        self.poll_s = poll_s
        self.grace_s = grace_s
        self._stop = threading.Event()

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def start(self) -> ParentWatch:
        threading.Thread(target=self._watch, name="refiner-parent-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            if not self.parent_alive():
                os.kill(os.getpid(), signal.SIGTERM)
                if not self._stop.wait(self.grace_s):
                    os._exit(1)
                return


def exit_with_parent(parent_pid: int) -> ParentWatch:
    """Make this worker end when ``parent_pid`` (its launcher) dies; returns the watch.

    A parent that died before this was set up is noticed at once.
    """
    die_with_parent(signal.SIGTERM)
    if os.getppid() != parent_pid:  # the launcher died before the death signal was armed
        os._exit(1)
    return ParentWatch(parent_pid).start()
