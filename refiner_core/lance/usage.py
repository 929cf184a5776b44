"""Whether this process runs Lance itself, answered without importing Lance.

Importing :mod:`~refiner_core.lance.isolation` (which imports Lance) makes the
importing process the home of Lance isolation: its Lance calls run in helper
processes, so forking it stays safe. Lance runs in a process itself when it is not
that home (a worker forked from it), or when isolation stopped there (a worker started
fresh, or a home whose helper process died). ``launch_local`` asks
:func:`lance_runs_here` to choose its default start method, and so never imports Lance
for a pipeline that does not use it.

Example:
    >>> from refiner_core.lance.usage import lance_runs_here
    >>> lance_runs_here()
    False
"""

from __future__ import annotations

import multiprocessing
import os

_home_pid: int | None = None  # the process whose Lance calls go to helpers; None: no Lance yet


def make_home() -> None:
    """Send this process's Lance calls to helper processes (the isolation module's import)."""
    global _home_pid
    _home_pid = os.getpid()


def stop_isolating() -> None:
    """Run Lance calls made in this process in it, from now on."""
    global _home_pid
    _home_pid = -1


def isolating() -> bool:
    """Whether Lance calls in this process go to another process."""
    return os.getpid() == _home_pid and "fork" in multiprocessing.get_all_start_methods()


def lance_runs_here() -> bool:
    """Whether this process runs (or has run) Lance itself, so that a child forked from it
    may crash inside Lance. ``False`` while refiner has not touched Lance here."""
    return _home_pid is not None and not isolating()
