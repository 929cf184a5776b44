"""The default worker count: CPUs this process may use, minus those other work keeps busy."""

from __future__ import annotations

import os

import pytest

from refiner_core import cpus


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A host of ``host`` CPUs, this process allowed ``allowed`` of them, no cgroup quota;
    ``os.getloadavg`` answers ``load``."""

    def configure(*, host: int, allowed: int, load: float) -> dict:
        monkeypatch.setattr(os, "cpu_count", lambda: host)
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(allowed)))
        monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
        return {"cgroup_root": tmp_path / "no-cgroup", "proc_root": tmp_path / "no-proc"}

    return configure


@pytest.mark.parametrize(
    ("load", "expected"),
    [
        (0.0, 4),  # idle
        (0.4, 4),  # background noise keeps every CPU
        (1.0, 3),  # one busy loop
        (2.0, 2),  # two busy loops
        (2.6, 1),  # 1.4 CPUs idle: one counts
        (3.9, 1),
        (40.0, 1),  # saturated: still one worker
    ],
)
def test_other_work_takes_cpus_from_the_default(machine, load, expected):
    roots = machine(host=4, allowed=4, load=load)
    assert cpus.available_cpus(**roots) == 4
    assert cpus.usable_cpus(**roots) == expected


def test_own_load_is_not_counted_against_the_job(machine):
    roots = machine(host=4, allowed=4, load=3.0)
    assert cpus.usable_cpus(**roots) == 1
    assert cpus.usable_cpus(own_load=2.0, **roots) == 3
    assert cpus.usable_cpus(own_load=5.0, **roots) == 4  # more than the load: nothing busy


def test_host_load_is_shared_out_over_the_host_cpus(machine):
    # 2 of 64 CPUs: the host's load of 32 keeps half of every CPU busy, ours included
    roots = machine(host=64, allowed=2, load=32.0)
    assert cpus.busy_cpus(32.0, 0.0, capacity=2, host_cpus=64) == 1.0
    assert cpus.usable_cpus(**roots) == 1
    assert cpus.usable_cpus(load=16.0, **roots) == 2  # an explicit load wins over the system's


def test_cgroup_quota_caps_before_the_load_counts(machine, tmp_path):
    roots = machine(host=8, allowed=8, load=4.0)
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/job\n")
    (cgroup / "job").mkdir(parents=True)
    (cgroup / "job" / "cpu.max").write_text("400000 100000\n")  # 4 CPUs
    assert cpus.available_cpus(cgroup, proc) == 4
    # half of the 8-CPU host is busy, so half of the 4 allowed CPUs
    assert cpus.usable_cpus(cgroup_root=cgroup, proc_root=proc) == 2
    assert cpus.usable_cpus(load=0.0, **roots) == 8


def test_no_load_average_means_no_other_work(machine, monkeypatch):
    roots = machine(host=2, allowed=2, load=0.0)

    def unavailable():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unavailable)
    assert cpus.usable_cpus(**roots) == 2


@pytest.mark.parametrize(
    ("field", "value"), [("load", -1.0), ("own_load", -0.5), ("load", float("nan"))]
)
def test_a_negative_load_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"{field} must be a load average >= 0"):
        cpus.usable_cpus(**{field: value})
