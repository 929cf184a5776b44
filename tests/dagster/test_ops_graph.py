"""plan -> write (dynamic fan-out) -> finalize, under the multiprocess executor."""

from __future__ import annotations

import os

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.ops import group_shards

OUTPUT_ENV = "REFINER_TEST_GRAPH_OUTPUT"
MEDIA_ENV = "REFINER_TEST_GRAPH_MEDIA"
NUM_ROWS = 12


def build_sequence() -> mdr.PipelineSequence:
    """Rebuilt in every step process: 12 rows in 6 shards, media packed into blocks."""
    media = os.environ[MEDIA_ENV]
    items = [
        {"episode": i, "image": os.path.join(media, f"{i:03d}.bin"), "pid": 0}
        for i in range(NUM_ROWS)
    ]
    pipeline = mdr.from_items(
        items, items_per_shard=2, dtypes={"image": mdr.datatype.image_path()}
    ).map(lambda row: {"pid": os.getpid()})
    return pipeline.write_parquet(
        os.environ[OUTPUT_ENV], assets=mdr.BlobAssetConfig(target_bytes=64)
    )


def fanout_job() -> dg.JobDefinition:
    return rd.build_write_job(
        build_sequence,
        name="fanout",
        max_tasks=3,
        # a forkserver with the heavy imports done once keeps step start-up cheap
        executor_def=dg.multiprocess_executor.configured(
            {
                "max_concurrent": 3,
                "start_method": {"forkserver": {"preload_modules": [__name__]}},
            }
        ),
    )


def _media(folder) -> dict[int, bytes]:
    folder.mkdir()
    data = {}
    for i in range(NUM_ROWS):
        data[i] = bytes([i]) * (5 + i)
        (folder / f"{i:03d}.bin").write_bytes(data[i])
    return data


def test_fanout_under_multiprocess_executor(dagster_instance, tmp_path, monkeypatch):
    data = _media(tmp_path / "media")
    out = tmp_path / "out"
    monkeypatch.setenv(MEDIA_ENV, str(tmp_path / "media"))
    monkeypatch.setenv(OUTPUT_ENV, str(out))

    with dg.execute_job(dg.reconstructable(fanout_job), instance=dagster_instance) as result:
        assert result.success
        steps = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS"}
        summary = result.output_for_node("fanout_finalize")
        processes = {
            e.pid
            for e in result.all_events
            if e.event_type_value == "STEP_START" and e.step_key.startswith("fanout_write")
        }

    writes = sorted(s for s in steps if s.startswith("fanout_write["))
    assert writes == [f"fanout_write[task_{i:05d}]" for i in range(3)]
    assert {"fanout_plan", "fanout_finalize"} <= steps
    assert len(processes) == 3  # each write task ran in its own process
    assert summary.counters["rows_written"] == NUM_ROWS
    assert summary.shards == 6
    assert summary.counters["assets_written"] == NUM_ROWS
    assert summary.rejected_attempts_removed == 0

    rows = sorted(mdr.read_parquet(str(out)).iter_rows(), key=lambda r: r.episode)
    assert [r.episode for r in rows] == list(range(NUM_ROWS))
    assert {r.pid for r in rows} == processes  # rows were produced by the write steps
    assert [mdr.read_blob(r.image) for r in rows] == [data[i] for i in range(NUM_ROWS)]


def test_graph_in_process_and_retry_leaves_one_attempt(dagster_instance, tmp_path, monkeypatch):
    """A write step that ran twice (a retry) leaves duplicates the finalize op removes."""
    _media(tmp_path / "media")
    out = tmp_path / "out"
    monkeypatch.setenv(MEDIA_ENV, str(tmp_path / "media"))
    monkeypatch.setenv(OUTPUT_ENV, str(out))
    calls = {"n": 0}

    def flaky_sequence() -> mdr.PipelineSequence:
        sequence = build_sequence()
        stage = sequence.stages[0]
        original = stage.run_task

        def run_task(shards, *, run_id):
            manifests = original(shards, run_id=run_id)
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("worker lost after writing its attempts")
            return manifests

        stage.run_task = run_task
        return sequence

    job = rd.build_write_job(
        flaky_sequence,
        name="flaky",
        shards_per_task=6,
        executor_def=dg.in_process_executor,
        write_retry_policy=dg.RetryPolicy(max_retries=1),
    )
    result = job.execute_in_process(instance=dagster_instance)
    assert result.success
    summary = result.output_for_node("flaky_finalize")
    assert summary.counters["rows_written"] == NUM_ROWS
    assert summary.rejected_attempts_removed == 6
    assert len(mdr.read_parquet(str(out)).materialize()) == NUM_ROWS
    assert len(os.listdir(out / "_refiner" / "attempts")) == 6


def test_plan_config_changes_fan_out(dagster_instance, tmp_path, monkeypatch):
    _media(tmp_path / "media")
    monkeypatch.setenv(MEDIA_ENV, str(tmp_path / "media"))
    monkeypatch.setenv(OUTPUT_ENV, str(tmp_path / "out"))
    job = rd.build_write_job(build_sequence, name="cfg", executor_def=dg.in_process_executor)
    result = job.execute_in_process(
        instance=dagster_instance,
        run_config={"ops": {"cfg_plan": {"config": {"shards_per_task": 4}}}},
    )
    assert result.success
    manifests = result.output_for_node("cfg_write")
    assert sorted(len(m) for m in manifests.values()) == [2, 4]


def test_group_shards():
    assert group_shards([], max_tasks=3, shards_per_task=None) == []
    assert group_shards(list(range(5)), max_tasks=8, shards_per_task=None) == [
        [i] for i in range(5)
    ]
    assert group_shards(list(range(5)), max_tasks=1, shards_per_task=2) == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="shards_per_task"):
        group_shards([1], max_tasks=1, shards_per_task=0)


def test_build_sequence_must_be_a_writer(dagster_instance):
    job = rd.build_write_job(
        lambda: mdr.from_items([{"a": 1}]), name="bad", executor_def=dg.in_process_executor
    )
    with pytest.raises(TypeError, match="PipelineSequence"):
        job.execute_in_process(instance=dagster_instance)
