"""A worker that stops making progress becomes an error naming it and its shard."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import refiner_core as mdr
from refiner_core.execution.watchdog import ProgressWatch, check_progress_timeout

from .helpers import data_files

pytestmark = pytest.mark.timeout(90)

TIMEOUT_S = 3.0
SLACK_S = 15.0  # worker start, the poll interval and a busy machine


def items(n: int, per_shard: int) -> mdr.Pipeline:
    return mdr.from_items([{"i": i} for i in range(n)], items_per_shard=per_shard)


def hangs_on(row_index: int, pid_file: Path, how: str):
    """A map callback that records its worker's pid, then never returns on ``row_index``."""

    def fn(row):
        if row.i == row_index:
            pid_file.write_text(str(os.getpid()))
            if how == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)  # the whole process freezes
            while True:
                time.sleep(3600)
        return {"square": row.i * row.i}

    return fn


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize("how", ["block", "stop"])
def test_a_worker_stuck_in_its_shard_is_killed_and_named(tmp_path, how):
    pid_file = tmp_path / "hung.pid"
    out = tmp_path / "out"
    sequence = items(40, per_shard=10).map(hangs_on(25, pid_file, how)).write_parquet(str(out))
    started = time.monotonic()
    with pytest.raises(mdr.StageFailed) as info:
        sequence.launch_local(num_workers=2, start_method="fork", progress_timeout_s=TIMEOUT_S)
    elapsed = time.monotonic() - started
    message = str(info.value)
    pid = int(pid_file.read_text())
    assert info.value.shard_id == "00002"
    assert "failed on shard 00002" in message
    assert f"(pid {pid}) sent no progress on shard 00002" in message
    assert "progress_timeout_s=3" in message and "progress_timeout_s=...)" in message
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + SLACK_S, elapsed
    assert_gone(pid)  # killed and reaped, not left behind
    # nothing of the hung shard is visible
    assert not [f for f in data_files(out) if f.name.startswith("00002__")]


class _NeverCloses:
    """A callback whose ``close()`` (run as its worker exits) never returns."""

    def __init__(self, pid_file: Path) -> None:
        self.pid_file = pid_file

    def __call__(self, row):
        return {"square": row.i * row.i}

    def close(self) -> None:
        self.pid_file.write_text(str(os.getpid()))
        while True:
            time.sleep(3600)


def test_a_worker_that_never_exits_after_its_last_shard_is_killed_and_named(tmp_path):
    pid_file = tmp_path / "hung.pid"
    sequence = (
        items(10, per_shard=10)
        .map_async(factory=lambda: _NeverCloses(pid_file))
        .write_parquet(str(tmp_path / "out"))
    )
    started = time.monotonic()
    with pytest.raises(mdr.StageFailed) as info:
        sequence.launch_local(num_workers=1, start_method="fork", progress_timeout_s=TIMEOUT_S)
    elapsed = time.monotonic() - started
    message = str(info.value)
    pid = int(pid_file.read_text())
    assert f"worker process 0 (pid {pid}) did not exit within" in message
    assert "(its last shard was 00000)" in message
    assert elapsed < TIMEOUT_S + SLACK_S, elapsed
    assert_gone(pid)


def test_a_slow_shard_that_reports_progress_is_left_alone(tmp_path):
    def slow(row):
        time.sleep(0.1)
        return {"square": row.i * row.i}

    # 40 rows at 0.1 s: 4 s per shard, longer than the timeout, in blocks of 4 rows
    sequence = items(80, per_shard=40).with_max_block_rows(4).map(slow)
    stats = sequence.write_parquet(str(tmp_path / "out")).launch_local(
        num_workers=2, start_method="fork", progress_timeout_s=TIMEOUT_S
    )
    assert stats.summary.counters["rows_written"] == 80


@pytest.mark.parametrize("bad", [0, -1.0, "60", True])
def test_progress_timeout_is_checked(bad):
    with pytest.raises(ValueError, match=r"progress_timeout_s must be a positive number.*None"):
        check_progress_timeout(bad)
    with pytest.raises(ValueError, match="progress_timeout_s"):
        items(1, 1).launch_local(progress_timeout_s=bad)


def test_the_watch_times_each_worker_from_its_last_message():
    watch = ProgressWatch(5.0, now=lambda: 0.0)
    watch.assign(0, "00000", now=0.0)
    watch.assign(1, "00001", now=0.0)
    watch.heard(0, now=4.0)
    assert [(h.worker, h.shard_id, h.running) for h in watch.overdue(now=6.0)] == [
        (1, "00001", True)
    ]
    watch.assign(1, None, now=6.0)  # told to stop: keeps its last shard for the message
    watch.forget(0)
    assert [(h.worker, h.shard_id, h.running) for h in watch.overdue(now=12.0)] == [
        (1, "00001", False)
    ]
    assert ProgressWatch(None).overdue(now=1e9) == []
