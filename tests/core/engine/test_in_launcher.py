"""Small jobs run in the launching process: when the rule applies, when it does not, and
that the output, manifests, run dir and errors are those a worker would have made."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.errors import StageFailed
from refiner_core.execution.pool import WorkerPool
from refiner_core.execution.stages import WriteStage
from refiner_core.io import DataFolder
from refiner_core.manifests import read_persisted

from .helpers import CallLog, read_output_rows


def media_index(tmp_path: Path, count: int = 6) -> str:
    """A Parquet index of ``count`` small local files (one row group)."""
    src = tmp_path / "src"
    src.mkdir(parents=True)
    paths = []
    for i in range(count):
        path = src / f"clip_{i}.bin"
        path.write_bytes(bytes([i]) * (100 + i))
        paths.append(str(path))
    index = tmp_path / "index.parquet"
    pq.write_table(pa.table({"i": list(range(count)), "video": paths}), index)
    return str(index)


def pack(index: str, out: Path, **launch) -> mdr.LaunchStats:
    pipeline = mdr.read_parquet(index, dtypes={"video": mdr.datatype.video_path()})
    return pipeline.write_parquet(str(out), assets=mdr.BlobAssetConfig()).launch_local(**launch)


@pytest.fixture
def pool_runs(monkeypatch) -> list[int]:
    """How many shards each worker pool of the test was given."""
    runs: list[int] = []
    original = WorkerPool.run

    def run(self, shards, num_workers):
        runs.append(len(shards))
        return original(self, shards, num_workers)

    monkeypatch.setattr(WorkerPool, "run", run)
    return runs


def test_a_one_shard_job_without_steps_runs_in_the_launcher(tmp_path, pool_runs):
    stats = pack(media_index(tmp_path), tmp_path / "out")
    assert [s.in_process for s in stats.stages] == [True, False]
    assert pool_runs == []  # no worker process was started
    assert stats.stages[0].shards == 1 and stats.stages[0].rows == 6
    assert stats.summary.counters["assets_written"] == 6
    refs = [r["video"] for r in read_output_rows(tmp_path / "out")]
    assert [r["size"] for r in refs] == [100 + i for i in range(6)]
    with open(refs[3]["path"], "rb") as f:
        f.seek(refs[3]["offset"])
        assert f.read(refs[3]["size"]) == bytes([3]) * 103


@pytest.mark.parametrize(
    "case",
    ["two shards", "num_workers=2", "start method given", "a map step"],
)
def test_the_rule_does_not_apply(tmp_path, pool_runs, case):
    items = [{"i": i} for i in range(4)]
    pipeline = mdr.from_items(items, items_per_shard=2 if case == "two shards" else 4)
    if case == "a map step":
        pipeline = pipeline.map(lambda row: {"j": row.i})
    launch = {"num_workers": 2} if case == "num_workers=2" else {}
    if case == "start method given":
        launch["start_method"] = "fork"
    stats = pipeline.write_parquet(str(tmp_path / "out")).launch_local(**launch)
    assert stats.stages[0].in_process is False
    assert pool_runs == [stats.stages[0].shards]
    assert stats.summary.counters["rows_written"] == 4


def test_a_factory_step_still_runs_once_in_a_worker(tmp_path, pool_runs):
    log = CallLog(tmp_path / "log")

    def factory():
        log.record("factory")
        return lambda batch: [{"j": row.i * 2} for row in batch]

    stats = (
        mdr.from_items([{"i": i} for i in range(3)])
        .batch_map(factory=factory, batch_size=2)
        .write_parquet(str(tmp_path / "out"))
        .launch_local()
    )
    assert stats.stages[0].in_process is False and pool_runs == [1]
    [(pid, _)] = log.events("factory")
    assert pid != os.getpid()
    assert sorted(r["j"] for r in read_output_rows(tmp_path / "out")) == [0, 2, 4]


def _without_bytes(counters: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counters.items() if k != "bytes_written"}


def _manifest_view(out: Path) -> list[tuple]:
    """What a manifest says about its attempt, without ids, times and file names."""
    manifests = read_persisted(DataFolder(str(out))).manifests
    return [
        (
            m.shard_id,
            len(m.files),
            len(m.asset_dirs),
            _without_bytes(m.counters),
        )
        for m in manifests
    ]


def test_same_output_and_manifests_in_the_launcher_and_in_a_worker(tmp_path):
    index = media_index(tmp_path)
    here = pack(index, tmp_path / "here")
    worker = pack(index, tmp_path / "worker", start_method="fork")
    assert (here.stages[0].in_process, worker.stages[0].in_process) == (True, False)
    # only the block paths' lengths differ (the two output folders' names)
    assert _without_bytes(here.summary.counters) == _without_bytes(worker.summary.counters)
    assert len(here.summary.files) == len(worker.summary.files) == 1
    assert _manifest_view(tmp_path / "here") == _manifest_view(tmp_path / "worker")

    def cells(out: Path) -> list[tuple]:
        rows = read_output_rows(out)
        return [(r["i"], r["video"]["offset"], r["video"]["size"]) for r in rows]

    assert cells(tmp_path / "here") == cells(tmp_path / "worker")


def test_a_failure_in_the_launcher_reads_as_a_worker_failure(tmp_path, pool_runs):
    index = tmp_path / "index.parquet"
    pq.write_table(pa.table({"video": [str(tmp_path / "missing.bin")]}), index)
    out = tmp_path / "out"
    messages = []
    for launch in ({}, {"start_method": "fork"}):
        with pytest.raises(StageFailed) as caught:
            pack(str(index), out, **launch)
        assert caught.value.stage == 0 and caught.value.shard_id == "00000"
        messages.append(str(caught.value).split("\n\nworker traceback:\n")[0])
    assert pool_runs == [1]  # the first launch failed in the launcher, the second in a worker
    assert messages[0] == messages[1]
    assert "missing.bin" in messages[0]
    assert read_persisted(DataFolder(str(out))).manifests == ()


def test_a_rundir_resumes_a_shard_that_ran_in_the_launcher(tmp_path):
    index = media_index(tmp_path)
    run = str(tmp_path / "run")
    first = pack(index, tmp_path / "out", rundir=run)
    assert first.stages[0].in_process is True
    assert sorted(os.listdir(tmp_path / "run" / "stage-000")) == ["00000.json"]
    again = pack(index, tmp_path / "out", rundir=run)
    assert again.stages[0].shards_skipped == 1 and again.stages[0].in_process is False
    assert again.summary.counters == first.summary.counters


def test_an_interrupt_in_the_launcher_closes_its_loop_and_passes(tmp_path, monkeypatch):
    def interrupted(self, shard, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(WriteStage, "run_shard", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pack(media_index(tmp_path), tmp_path / "out")
    assert not [t for t in threading.enumerate() if t.name == "refiner-loop" and t.is_alive()]
    monkeypatch.undo()
    stats = pack(media_index(tmp_path / "again"), tmp_path / "out")  # the lease was released
    assert stats.summary.counters["assets_written"] == 6
