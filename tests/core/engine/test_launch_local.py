"""``launch_local``: failures, resume from a rundir, stats, and ``then()``."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import refiner_core as mdr

from .helpers import CallLog, all_files, data_files, read_output_rows


def items(n: int, per_shard: int) -> mdr.Pipeline:
    return mdr.from_items([{"i": i} for i in range(n)], items_per_shard=per_shard)


def failing_on(row_index: int, delay: float = 0.0):
    def fn(row):
        time.sleep(delay)
        if row.i == row_index:
            raise ValueError(f"frame count of row {row.i} is negative")
        return {"ok": True}

    return fn


@pytest.mark.parametrize("num_workers", [1, 2])
def test_callback_failure_raises_stage_failed_naming_shard_step_and_cause(tmp_path, num_workers):
    out = tmp_path / "out"
    # small blocks: the failing shard has written blocks to its data file before it fails,
    # and the other worker is in the middle of its own shard when the run stops
    pipeline = (
        items(60, per_shard=10)
        .with_max_block_rows(2)
        .map(lambda r: {"x": r.i})
        .map(failing_on(15, delay=0.005))
    )
    with pytest.raises(mdr.StageFailed) as info:
        pipeline.write_parquet(str(out)).launch_local(num_workers=num_workers)
    error = info.value
    message = str(error)
    assert error.shard_id == "00001" and error.stage == 0
    assert "shard 00001" in message
    assert "step 1 (map)" in message
    assert "ValueError" in message and "frame count of row 15 is negative" in message
    # nothing of the failed shard is visible, and no temporary file is left behind
    names = all_files(out)
    assert not [n for n in names if n.startswith("00001__")], names
    assert not [n for n in names if n.endswith(".tmp") or "/." in n or n.startswith(".")], names
    # whatever was written is complete, readable Parquet (with two workers, whichever
    # other shards finished before the stop)
    written = data_files(out)
    if num_workers == 1:
        assert [p.name[:5] for p in written] == ["00000"]  # shard 00000 ran first, whole
    for path in written:
        assert pq.read_table(path).num_rows == 10


def test_failure_in_a_plain_run_stage(tmp_path):
    with pytest.raises(mdr.StageFailed, match=r"shard 00002.*step 0 \(filter\).*ZeroDivisionError"):
        items(30, per_shard=10).filter(lambda r: 1 / (r.i - 25)).launch_local()


def test_resume_from_rundir_skips_completed_shards(tmp_path):
    log = CallLog(tmp_path / "log")
    marker = tmp_path / "fail-on-shard-2"
    marker.touch()

    def fn(row):
        log.record("call", row.i)
        if row.i == 25 and marker.exists():
            raise RuntimeError("transient outage")
        return {"doubled": 2 * row.i}

    out, rundir = tmp_path / "out", tmp_path / "run"
    sequence = items(50, per_shard=10).map(fn).write_parquet(str(out))
    with pytest.raises(mdr.StageFailed, match="transient outage"):
        sequence.launch_local(num_workers=1, rundir=str(rundir))
    first = [int(tag) for _, tag in log.events("call")]
    assert sorted(first) == list(range(26))  # shards 0 and 1 done, shard 2 failed at row 25

    marker.unlink()
    stats = sequence.launch_local(num_workers=1, rundir=str(rundir))
    calls = sorted(int(tag) for _, tag in log.events("call"))
    # shards 0 and 1 are not recomputed: their rows were called exactly once
    assert calls == list(range(20)) + sorted(list(range(20, 26)) * 2) + list(range(26, 50))
    write = stats.stages[0]
    assert (write.shards, write.shards_skipped) == (5, 2)
    assert stats.summary.counters["rows_written"] == 50 and stats.summary.shards == 5
    assert stats.rundir == str(rundir)
    rows = read_output_rows(out)
    assert sorted(r["doubled"] for r in rows) == [2 * i for i in range(50)]
    assert len(data_files(out)) == 5

    # a third launch has nothing left to do
    again = sequence.launch_local(num_workers=2, rundir=str(rundir))
    assert again.stages[0].shards_skipped == 5
    assert log.count("call") == len(calls)
    assert again.summary.counters["rows_written"] == 50


def test_stats_and_summary_file(tmp_path):
    out = tmp_path / "out"
    stats = items(23, per_shard=5).write_parquet(str(out)).launch_local(num_workers=2, name="demo")
    assert stats.name == "demo" and stats.rundir is None
    assert [s.kind for s in stats.stages] == ["write", "finalize"]
    assert stats.stages[0].shards == 5 and stats.stages[0].rows == 23
    summary = stats.summary
    assert summary.counters["rows_written"] == 23 and summary.counters["rows_read"] == 23
    assert summary.shards == 5 and summary.counters["files_written"] == 5
    files = data_files(out)
    assert sorted(summary.files) == sorted(p.name for p in files)
    assert summary.counters["bytes_written"] == sum(p.stat().st_size for p in files)
    assert summary.rejected_attempts_removed == 0 and summary.files_removed == 0
    on_disk = json.loads((out / "_refiner" / "summary.json").read_text())
    assert on_disk["rows_written"] == 23 and on_disk["run_id"] == stats.run_id


def test_then_appends_a_pipeline_and_a_sequence(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    log = CallLog(tmp_path / "log")

    def note(row):
        log.record("after", row.i)
        return {}

    sequence = (
        items(12, per_shard=4)
        .map(lambda r: {"sq": r.i * r.i})
        .write_parquet(str(first))
        .then(mdr.read_parquet(str(first)).map(lambda r: {"neg": -r.sq}).write_jsonl(str(second)))
        .then(mdr.read_parquet(str(first)).map(note))
    )
    assert [s.kind for s in sequence.stages] == ["write", "finalize", "write", "finalize", "run"]
    assert sequence.output == str(first)
    stats = sequence.launch_local(num_workers=2)
    assert [s.kind for s in stats.stages] == ["write", "finalize", "write", "finalize", "run"]
    assert stats.summary.output == str(second) and stats.summary.counters["rows_written"] == 12
    jsonl_rows = mdr.read_jsonl(str(second)).materialize()
    assert sorted(r.neg for r in jsonl_rows) == sorted(-i * i for i in range(12))
    assert sorted(int(tag) for _, tag in log.events("after")) == list(range(12))
    with pytest.raises(TypeError):
        sequence.then(42)


def test_pipeline_launch_local_without_writer(tmp_path):
    log = CallLog(tmp_path / "log")

    def note(row):
        log.record("seen", row.i)
        return {}

    stats = items(9, per_shard=2).map(note).launch_local(num_workers=2)
    assert [s.kind for s in stats.stages] == ["run"]
    assert stats.stages[0].rows == 9 and stats.stages[0].shards == 5
    assert sorted(int(tag) for _, tag in log.events("seen")) == list(range(9))


def test_no_workers_for_empty_plan(tmp_path):
    out = tmp_path / "out"
    stats = mdr.from_items([]).write_parquet(str(out)).launch_local(num_workers=2)
    assert stats.summary.counters["rows_written"] == 0 and stats.summary.shards == 0
    assert data_files(out) == []


def test_rundir_keeps_run_id(tmp_path):
    rundir = tmp_path / "run"
    a = items(3, per_shard=3).launch_local(rundir=str(rundir))
    b = items(3, per_shard=3).launch_local(rundir=str(rundir))
    assert a.run_id == b.run_id
    assert Path(rundir).is_dir()


def test_a_worker_process_that_dies_fails_the_stage_naming_its_shard(tmp_path):
    def crash(row):
        if row.i == 12:
            os._exit(3)  # as if the process were killed (out of memory, segfault)
        return {}

    started = time.monotonic()
    with pytest.raises(mdr.StageFailed, match=r"shard 00001.*exit code 3"):
        items(30, per_shard=10).map(crash).write_parquet(str(tmp_path / "out")).launch_local(
            num_workers=2
        )
    # the other worker is stopped promptly, not left waiting on the dead one
    assert time.monotonic() - started < 20
    assert not [n for n in all_files(tmp_path / "out") if n.endswith(".tmp")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("error", [EOFError, KeyboardInterrupt, SystemExit])
def test_any_exception_from_a_callback_fails_the_stage(tmp_path, error):
    def fn(row):
        if row.i == 4:
            raise error("raised by the callback")
        return {}

    with pytest.raises(mdr.StageFailed, match=rf"shard 00001.*{error.__name__}"):
        items(10, per_shard=3).map(fn).write_parquet(str(tmp_path / "out")).launch_local()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("kind", ["map", "map_async"])
def test_base_exceptions_from_callbacks_do_not_hang_in_process(error, kind):
    def fn(row):
        if row.i == 4:
            raise error("raised by the callback")
        return {}

    async def afn(row):
        return fn(row)

    pipeline = items(10, per_shard=10)
    pipeline = pipeline.map(fn) if kind == "map" else pipeline.map_async(afn)
    with pytest.raises((error, mdr.StepError)) as info:
        pipeline.materialize()
    assert info.type is error or isinstance(info.value.__cause__, error)
    # the next in-process run works as usual
    assert len(items(3, per_shard=3).map_async(afn).materialize()) == 3


def test_workers_keep_the_inherited_heap_out_of_garbage_collection(tmp_path):
    """A worker freezes what it inherits from the launcher, so full collections only
    walk the objects the worker made itself."""
    before = gc.get_freeze_count()
    out = tmp_path / "out"
    items(4, per_shard=2).map(
        lambda row: {"i": row.i, "frozen": gc.get_freeze_count()}
    ).write_parquet(str(out)).launch_local(num_workers=2)
    rows = read_output_rows(out)
    assert len(rows) == 4
    assert all(row["frozen"] > 1000 for row in rows)
    assert gc.get_freeze_count() == before  # the launcher itself is untouched


class _ClosingStamp:
    """A map callback whose ``close()`` writes the time the worker closed it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, row):
        return {"i": row.i}

    def close(self) -> None:
        self.path.write_text(repr(time.monotonic()))


def test_a_worker_stops_after_its_last_shard_without_waiting_for_the_launcher(
    tmp_path, monkeypatch
):
    """With no shard left to hand out, a worker is told to stop along with its last
    shard: it closes its callbacks while the launcher is still recording that shard."""
    from refiner_core.execution import rundir

    stamp = tmp_path / "closed_at"
    recorded: list[float] = []
    mark = rundir.RunDir.mark

    def slow_mark(self, index, manifest):
        time.sleep(0.5)
        mark(self, index, manifest)
        recorded.append(time.monotonic())

    monkeypatch.setattr(rundir.RunDir, "mark", slow_mark)
    items(2, per_shard=2).map_async(factory=lambda: _ClosingStamp(stamp)).write_parquet(
        str(tmp_path / "out")
    ).launch_local()
    assert len(recorded) == 1
    assert float(stamp.read_text()) < recorded[0]


def test_every_worker_is_reaped_before_launch_returns_even_one_slow_to_exit(tmp_path):
    """A worker's process may outlive its pipe (here a non-daemon thread delays its
    exit); the launcher goes on with finalization but ends every worker before it
    returns."""
    import multiprocessing
    import threading

    def linger(row):
        threading.Thread(target=time.sleep, args=(30,), daemon=False).start()
        return {"i": row.i}

    started = time.monotonic()
    stats = (
        items(4, per_shard=2)
        .map(linger)
        .write_parquet(str(tmp_path / "out"))
        .launch_local(num_workers=2)
    )
    assert stats.summary.counters["rows_written"] == 4
    assert multiprocessing.active_children() == []
    assert time.monotonic() - started < 20


def test_an_error_in_the_launcher_itself_stops_the_workers_promptly(tmp_path, monkeypatch):
    """If recording a finished shard fails (a full disk), the launcher raises that error
    and stops the workers instead of letting them run the shards they were given."""
    from refiner_core.execution import rundir

    log = CallLog(tmp_path / "log")

    async def slow(row):
        await asyncio.sleep(0.3)
        log.record("row", row.i)
        return {"i": row.i}

    def full_disk(self, index, manifest):
        raise OSError(28, "No space left on device", str(tmp_path / "run"))

    monkeypatch.setattr(rundir.RunDir, "mark", full_disk)
    with pytest.raises(OSError, match="No space left"):
        items(20, per_shard=5).map_async(slow, max_in_flight=1).write_parquet(
            str(tmp_path / "out")
        ).launch_local()
    # the first shard was written; the second, handed out before the error, was stopped
    # in its first row and its attempt aborted; no later shard started
    assert len(data_files(tmp_path / "out")) == 1
    assert 5 <= log.count("row") <= 6
    assert not [n for n in all_files(tmp_path / "out") if n.endswith(".tmp")]


def test_progress_lines_give_a_rate_only_for_stages_that_process_rows(tmp_path, capfd):
    mdr.from_items([{"a": i} for i in range(3_000)], items_per_shard=1_000).write_parquet(
        str(tmp_path / "out")
    ).launch_local(name="job")
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("[job")]
    write = [line for line in lines if "stage 0" in line]
    finalize = [line for line in lines if "stage 1: finalize" in line]
    assert write and "3/3 shards, 3.0k rows" in write[-1] and "rows/s" in write[-1]
    # the finalization counts the rows the write stage wrote; a rate over its own
    # few milliseconds would read as billions of rows per second
    assert finalize and "1/1 shards, 3.0k rows" in finalize[-1]
    assert not any("rows/s" in line for line in finalize)
