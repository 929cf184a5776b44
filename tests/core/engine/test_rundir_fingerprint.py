"""A run dir belongs to the pipeline that made it: another pipeline is refused, naming
the run dir and what differs, unless ``fresh=True`` starts a new run."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.execution.fingerprint import RunDirMismatch
from tests.core.engine.helpers import read_output_rows

pytestmark = pytest.mark.timeout(120)


def _crash_on_last_shard(row):
    if row["i"] >= 4:
        raise RuntimeError("stop before the last shard")
    return row


def _half_done(tmp_path, out):
    """A run dir whose first launch completed 2 of 3 shards of ``i`` in 0..5."""
    rundir = str(tmp_path / "run")
    pipeline = mdr.from_items([{"i": i} for i in range(6)], items_per_shard=2)
    with pytest.raises(mdr.StageFailed):
        pipeline.map(_crash_on_last_shard).write_parquet(out).launch_local(rundir=rundir)
    return rundir


def test_other_input_on_a_reused_run_dir_is_refused(tmp_path):
    out = str(tmp_path / "out")
    rundir = _half_done(tmp_path, out)
    other = mdr.from_items([{"i": i} for i in range(100, 106)], items_per_shard=2)
    with pytest.raises(RunDirMismatch) as caught:
        other.map(_crash_on_last_shard).write_parquet(out).launch_local(rundir=rundir)
    message = str(caught.value)
    assert f"run dir {rundir} was made for a different pipeline" in message
    assert "stage 0 (write_parquet" in message and "source items: recorded 'sha256" in message
    assert "fresh=True" in message


def test_other_steps_or_another_output_are_refused(tmp_path):
    out = str(tmp_path / "out")
    rundir = _half_done(tmp_path, out)
    pipeline = mdr.from_items([{"i": i} for i in range(6)], items_per_shard=2)
    with pytest.raises(RunDirMismatch, match=r"steps: 1 step\(s\) recorded, 0 now"):
        pipeline.write_parquet(out).launch_local(rundir=rundir)
    with pytest.raises(RunDirMismatch, match="step 0 \\(map\\) changed"):
        pipeline.map(lambda row: {"j": 1}).write_parquet(out).launch_local(rundir=rundir)
    elsewhere = str(tmp_path / "elsewhere")
    with pytest.raises(RunDirMismatch, match="sink url: recorded .*out', now .*elsewhere'"):
        pipeline.map(_crash_on_last_shard).write_parquet(elsewhere).launch_local(rundir=rundir)
    with pytest.raises(RunDirMismatch, match="sink format: recorded 'parquet', now 'jsonl'"):
        pipeline.map(_crash_on_last_shard).write_jsonl(out).launch_local(rundir=rundir)


def test_resume_skips_only_for_the_same_pipeline_and_fresh_rewrites_everything(tmp_path):
    out = str(tmp_path / "out")
    rundir = str(tmp_path / "run")
    rows = [{"i": i} for i in range(6)]
    pipeline = mdr.from_items(rows, items_per_shard=2).map(lambda row: {"v": row["i"] * 10})
    stats = pipeline.write_parquet(out).launch_local(rundir=rundir)
    again = pipeline.write_parquet(out).launch_local(rundir=rundir)
    assert again.run_id == stats.run_id and again.stages[0].shards_skipped == 3

    other = mdr.from_items([{"i": i} for i in range(10, 16)], items_per_shard=2)
    other = other.map(lambda row: {"v": row["i"] * 10})
    with pytest.raises(RunDirMismatch):
        other.write_parquet(out).launch_local(rundir=rundir)
    fresh = other.write_parquet(out).launch_local(rundir=rundir, fresh=True)
    assert fresh.run_id != stats.run_id and fresh.stages[0].shards_skipped == 0
    assert sorted(r["i"] for r in read_output_rows(tmp_path / "out")) == list(range(10, 16))
    assert fresh.summary.counters["rows_written"] == 6
    # the fresh run is now the run dir's pipeline
    assert other.write_parquet(out).launch_local(rundir=rundir).stages[0].shards_skipped == 3
    assert all(pq.read_table(p).num_rows == 2 for p in (tmp_path / "out").glob("*.parquet"))
