"""Whether this process runs Lance itself, answered without importing Lance.

Importing :mod:`~refiner_core.lance.isolation` (which imports Lance) makes the
importing process the home of Lance isolation: its Lance calls run in helper
processes, so forking it stays safe. Lance runs in a process itself when it is not
that home (a worker forked from it), when isolation stopped there (a worker started
fresh, or a home whose helper process died), or when the program called Lance itself
(a notebook that opened a dataset, a script that wrote one).

That last case is seen from Lance's runtime threads, which it starts on its first
real call (not on import) and names ``lance-cpu``, ``lance_background...`` (tokio's
``tokio-runtime-w`` in some builds): a child forked after they started inherits their
locks and runtime without the threads, and may crash or hang inside Lance. Where the
threads cannot be listed (no ``/proc``), a loaded ``lance`` module counts as used.
``launch_local`` asks :func:`lance_runs_here` to choose its default start method, and
so never imports Lance for a pipeline that does not use it.

Example:
    >>> from refiner_core.lance.usage import lance_runs_here
    >>> lance_runs_here()
    False
"""

from __future__ import annotations

import multiprocessing
import os
import sys

_home_pid: int | None = None  # the process whose Lance calls go to helpers; None: no Lance yet
_RUNTIME_THREADS = ("lance", "tokio")  # parts of the names Lance gives its runtime threads


def make_home() -> None:
    """Send this process's Lance calls to helper processes (the isolation module's import)."""
    global _home_pid
    _home_pid = os.getpid()


def stop_isolating() -> None:
    """Run Lance calls made in this process in it, from now on."""
    global _home_pid
    _home_pid = -1


def _thread_names() -> list[str] | None:
    """The names of this process's threads, or ``None`` where they cannot be listed."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    names = []
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read())
        except OSError:  # the thread ended meanwhile
            continue
    return names


def lance_started_here() -> bool:
    """Whether Lance has started its runtime in this process (the program, or refiner
    without isolation, called it here). ``False`` at once while ``lance`` is not loaded."""
    if "lance" not in sys.modules:
        return False
    names = _thread_names()
    if names is None:
        return True
    return any(part in name for name in names for part in _RUNTIME_THREADS)


def isolating() -> bool:
    """Whether Lance calls in this process go to another process: only from the home,
    and only while forking it is safe (Lance has not started here)."""
    return (
        os.getpid() == _home_pid
        and "fork" in multiprocessing.get_all_start_methods()
        and not lance_started_here()
    )


def lance_runs_here() -> bool:
    """Whether this process runs (or has run) Lance itself, so that a child forked from it
    may crash or hang inside Lance. ``False`` while nothing has started Lance here."""
    if _home_pid is None:
        return lance_started_here()
    return not isolating()
