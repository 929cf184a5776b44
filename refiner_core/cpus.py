"""How many CPUs this process may use: its CPU affinity and its cgroup's CPU quota.

``os.cpu_count()`` is the host's count; in a container limited to two CPUs on a
64-core host it still says 64, and 64 write workers would then share two CPUs.
:func:`available_cpus` is the smaller of the CPUs the process may be scheduled on
(``os.sched_getaffinity``) and the cgroup quota (``cpu.max`` in cgroup v2,
``cpu.cfs_quota_us / cpu.cfs_period_us`` in cgroup v1), rounded up, at least 1.

Example:
    >>> import os
    >>> from refiner_core.cpus import available_cpus
    >>> 1 <= available_cpus() <= (os.cpu_count() or 1)
    True
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available_cpus", "cgroup_cpu_limit"]


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _own_cgroup(proc_root: Path) -> str | None:
    """The unified (v2) cgroup path of this process, from ``/proc/self/cgroup``."""
    text = _read(proc_root / "self" / "cgroup")
    for line in (text or "").splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return None


def _quota_v2(cgroup_root: Path, own: str) -> float | None:
    """The tightest ``cpu.max`` from this process's cgroup up to the root."""
    limits = []
    folder = cgroup_root / own.lstrip("/")
    while True:
        raw = _read(folder / "cpu.max")
        if raw:
            quota, _, period = raw.partition(" ")
            if quota != "max" and period:
                limits.append(int(quota) / int(period))
        if folder == cgroup_root or cgroup_root not in folder.parents:
            break
        folder = folder.parent
    return min(limits) if limits else None


def _quota_v1(cgroup_root: Path) -> float | None:
    for folder in (cgroup_root / "cpu", cgroup_root / "cpu,cpuacct", cgroup_root):
        quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if quota and period and int(quota) > 0 and int(period) > 0:
            return int(quota) / int(period)
    return None


def cgroup_cpu_limit(
    cgroup_root: str | os.PathLike = "/sys/fs/cgroup", proc_root: str | os.PathLike = "/proc"
) -> float | None:
    """CPUs the cgroup quota allows (``1.5`` for 150 ms per 100 ms), ``None`` when unlimited."""
    root, proc = Path(cgroup_root), Path(proc_root)
    own = _own_cgroup(proc)
    if own is not None:
        limit = _quota_v2(root, own)
        if limit is not None:
            return limit
    return _quota_v1(root)


def available_cpus(
    cgroup_root: str | os.PathLike = "/sys/fs/cgroup", proc_root: str | os.PathLike = "/proc"
) -> int:
    """CPUs this process can use: affinity, capped by the cgroup quota (rounded up), >= 1."""
    cpus = _affinity()
    limit = cgroup_cpu_limit(cgroup_root, proc_root)
    if limit is not None:
        cpus = min(cpus, max(1, math.ceil(limit)))
    return max(1, cpus)
