"""The current process id without a system call per check.

State that must not cross a fork (sockets, counters) compares the pid it was made in
with :func:`current_pid`, once per request; ``os.getpid()`` is a system call, which
costs microseconds under sandboxed kernels.

>>> import os
>>> current_pid() == os.getpid()
True
"""

from __future__ import annotations

import os

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def current_pid() -> int:
    """This process's id, refreshed in every forked child."""
    return _pid
