"""How many CPUs this process may use, and how many of them other work leaves free.

``os.cpu_count()`` is the host's count; in a container limited to two CPUs on a
64-core host it still says 64, and 64 write workers would then share two CPUs.
:func:`available_cpus` is the smaller of the CPUs the process may be scheduled on
(``os.sched_getaffinity``) and the cgroup quota (``cpu.max`` in cgroup v2,
``cpu.cfs_quota_us / cpu.cfs_period_us`` in cgroup v1), rounded up, at least 1.

:func:`usable_cpus` is what a default worker count should be: those CPUs minus the
ones other work keeps busy, judged by the one-minute load average. Workers beyond the
idle CPUs only take turns with that work (and with each other) on the same cores.

Example:
    >>> import os
    >>> from refiner_core.cpus import available_cpus, usable_cpus
    >>> 1 <= usable_cpus() <= available_cpus() <= (os.cpu_count() or 1)
    True
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available_cpus", "cgroup_cpu_limit", "busy_cpus", "usable_cpus"]


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


def _host_cpus() -> int:
    return os.cpu_count() or 1


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform: assume no other work
        return 0.0


def busy_cpus(load: float, own_load: float, capacity: int, host_cpus: int) -> float:
    """CPUs of ``capacity`` that other work keeps busy, from the host's ``load`` average.

    ``own_load`` is the part of ``load`` that is this job's own (a caller that has kept
    ``n`` CPUs busy for the last minute passes ``n``). The load average counts runnable
    tasks on the whole host, so inside a quota or an affinity mask smaller than the host
    the others' load is spread over all ``host_cpus`` and only ``capacity / host_cpus``
    of it lands on ours.

    >>> busy_cpus(2.0, 0.0, capacity=2, host_cpus=2)   # two busy loops on a 2-CPU machine
    2.0
    >>> busy_cpus(32.0, 0.0, capacity=2, host_cpus=64)  # half of a 64-CPU host, 2-CPU quota
    1.0
    """
    others = max(0.0, load - own_load)
    return others * min(capacity, host_cpus) / max(host_cpus, 1)


def usable_cpus(
    *,
    load: float | None = None,
    own_load: float = 0.0,
    cgroup_root: str | os.PathLike = "/sys/fs/cgroup",
    proc_root: str | os.PathLike = "/proc",
) -> int:
    """CPUs free for new work: :func:`available_cpus` minus :func:`busy_cpus`, >= 1.

    A CPU counts as free when at least half of it is idle (the difference is rounded
    half up), so a light background load of a few tenths changes nothing, and one busy
    loop on a 2-CPU machine leaves one. ``load`` defaults to ``os.getloadavg()[0]``, the
    one-minute average: it follows a change in the other work within a minute or so,
    and counts this job's own recent work unless ``own_load`` says how much that is.

    >>> usable_cpus(load=0.0) == available_cpus()
    True
    >>> usable_cpus(load=1000.0)  # a saturated machine still gets one worker
    1
    """
    for name, value in (("load", load), ("own_load", own_load)):
        if value is not None and not value >= 0:  # also refuses NaN
            raise ValueError(
                f"usable_cpus: {name} must be a load average >= 0 (runnable tasks), got {value!r}"
            )
    capacity = available_cpus(cgroup_root, proc_root)
    if load is None:
        load = _load_average()
    busy = busy_cpus(load, own_load, capacity, _host_cpus())
    return max(1, min(capacity, math.floor(capacity - busy + 0.5)))
