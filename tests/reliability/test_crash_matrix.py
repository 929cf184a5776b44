"""The crash matrix: SIGKILL of the launcher, of one worker and of the whole process
group at seeded points, then a resume. Every trial must end with every row exactly
once, every reference reading its source bytes, no orphan or temporary file, and no
live process of the first launch. Also: workers end when their launcher is killed
(SIGKILL and SIGTERM), through the kernel's parent-death signal or, without it, by
watching their parent."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

import refiner_core as mdr
from refiner_core.execution.lifeline import ParentWatch
from tests.reliability import crash_harness as harness

TRIALS = 20
CELLS = [
    (point, target)
    for point in harness.POINTS
    for target in harness.TARGETS
    if not (point == "finalization" and target == "worker")  # finalization runs in the launcher
]


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    return harness.make_media(tmp_path_factory.mktemp("media"))


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize(("point", "target"), CELLS)
def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path, media, point, target):
    results = [harness.run_trial(tmp_path, media, point, target, seed) for seed in range(TRIALS)]
    print("\n" + harness.table_line(point, target, results))
    crashed = [r for r in results if r.first_exit != "exit 0"]
    assert len(crashed) == TRIALS, [r.first_exit for r in results]  # every fault fired
    dirty = [r for r in results if not r.clean]
    assert not dirty, dirty[:3]


def _slow_row(row):
    time.sleep(0.05)
    return {"j": row["i"] * 2}


def _workers_of(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _alive(processes: list[psutil.Process]) -> list[int]:
    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            continue
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_workers_end_with_their_launcher_and_a_resume_writes_each_row_once(tmp_path, signum):
    out, rundir = str(tmp_path / "out"), str(tmp_path / "run")
    pipeline = mdr.from_items([{"i": i} for i in range(40)], items_per_shard=5).map(_slow_row)
    pid = os.fork()
    if pid == 0:
        try:
            pipeline.write_parquet(out).launch_local(num_workers=2, rundir=rundir)
        finally:
            os._exit(0)
    deadline = time.monotonic() + 60
    workers: list[psutil.Process] = []
    while len(_alive(workers)) < 2 and time.monotonic() < deadline:
        workers = _workers_of(pid)
        time.sleep(0.02)
    assert len(_alive(workers)) >= 2
    time.sleep(0.3)  # the workers are in the middle of their shards
    os.kill(pid, signum)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 10
    while _alive(workers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _alive(workers) == []
    stats = pipeline.write_parquet(out).launch_local(num_workers=2, rundir=rundir)
    ids = sorted(row["i"] for row in mdr.read_parquet(out).iter_rows())
    assert ids == list(range(40)) and stats.summary.counters["rows_written"] == 40
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


@pytest.mark.timeout(60)
def test_without_the_death_signal_a_worker_still_ends_when_its_parent_dies(tmp_path):
    """The portable fallback: the watch notices the new parent id and ends the process."""
    marker = tmp_path / "child.pid"
    middle = os.fork()
    if middle == 0:
        child = os.fork()
        if child == 0:
            ParentWatch(os.getppid(), poll_s=0.05, grace_s=2).start()
            marker.write_text(str(os.getpid()))
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
        os._exit(0)
    deadline = time.monotonic() + 20
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    child = psutil.Process(int(marker.read_text()))
    os.kill(middle, signal.SIGKILL)
    os.waitpid(middle, 0)
    deadline = time.monotonic() + 10
    while _alive([child]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _alive([child]) == []
