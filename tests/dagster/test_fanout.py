"""Fan-out dataset assets (build_dataset_asset) on the in-process and multiprocess executors.

Same data as the IO-manager path, written by plan -> write x N -> finalize steps into
the same versioned storage; retries, re-execution from failure, partitions, checks
and downstream loads.
"""

from __future__ import annotations

import json
import os
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_core import integration, manifests
from refiner_core.manifests._attempts import parse_attempt_key
from refiner_dagster.checks import MISSING_ASSETS_CHECK, REFERENCE_INTEGRITY_CHECK
from refiner_dagster.fanout import attempt_id_for
from refiner_dagster.fanout_steps import group_shards
from refiner_dagster.storage import short_run_id
from tests.dagster import fanout_defs as defs
from tests.dagster.fanout_defs import expected_rows, published, rows_of


@pytest.fixture
def fanout_env(tmp_path, monkeypatch) -> dict[str, str]:
    """Media on local disk, an IO manager base folder and a row log, in the environment."""
    media = tmp_path / "media"
    media.mkdir()
    for i in range(defs.NUM_ROWS):
        (media / f"frame_{i:03d}.bin").write_bytes(defs.media_bytes(i))
    log = tmp_path / "log"
    log.mkdir()
    env = {defs.MEDIA_ENV: str(media), defs.BASE_ENV: str(tmp_path / "out"), defs.LOG_ENV: str(log)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(defs.FAULT_ENV, raising=False)
    monkeypatch.delenv(defs.S3_ENDPOINT_ENV, raising=False)
    return env


def attempt_ids_in(version: rd.DatasetVersion) -> set[str]:
    """The attempt id of every table file and asset folder left in the version folder."""
    folder = version.output_folder()
    found = set()
    for relative in folder.find(""):
        for part in relative.split("/"):
            stem = part.split(".", 1)[0]
            if (key := parse_attempt_key(stem)) is not None:
                found.add(key[1])
    return found


def step_events(result, kind: str) -> list[dg.DagsterEvent]:
    return [e for e in result.all_events if e.event_type_value == kind]


def test_in_process_fanout_is_an_io_manager_dataset(dagster_instance, fanout_env):
    seen: dict[str, Any] = {}

    @dg.asset(io_manager_key="refiner")
    def downstream(frames) -> mdr.Pipeline:
        seen["table"] = frames
        return frames.map(lambda r: {"double": 2 * r.i})

    # the asset audits its own version before publishing: nothing for build_dataset_checks
    assert rd.build_dataset_checks(defs.frames) == []
    assert sorted(s.name for s in defs.frames.check_specs) == sorted(
        [MISSING_ASSETS_CHECK, REFERENCE_INTEGRITY_CHECK]
    )
    result = dg.materialize(
        [defs.frames, downstream],
        instance=dagster_instance,
        resources={"refiner": defs.refiner_resource()},
    )
    assert result.success
    writes = sorted(
        e.step_key for e in step_events(result, "STEP_SUCCESS") if "frames_write" in e.step_key
    )
    assert writes == [f"frames.frames_write[task_{i:05d}]" for i in range(3)]

    version = published("frames")
    assert version.name == f"v-{short_run_id(result.run_id)}"
    assert rows_of(version) == expected_rows()
    summary = version.summary()
    assert summary.shards == 6 and summary.rows_written == defs.NUM_ROWS
    assert summary.counters["assets_written"] == defs.NUM_ROWS
    # the downstream asset received a lazy pipeline over the published table
    assert isinstance(seen["table"], mdr.Pipeline)
    assert sorted(r.i for r in seen["table"].iter_rows()) == list(range(defs.NUM_ROWS))

    (materialization,) = [
        e.materialization
        for e in result.get_asset_materialization_events()
        if e.asset_key == defs.frames.key
    ]
    assert materialization.metadata["dagster/row_count"].value == defs.NUM_ROWS
    assert materialization.metadata["refiner/state"].value == "published"
    assert materialization.metadata["shards"].value == 6
    evaluations = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert evaluations == {MISSING_ASSETS_CHECK: True, REFERENCE_INTEGRITY_CHECK: True}

    # the same storage layout and version record as the IO-manager path
    record = json.loads(version.folder.read_bytes(f"_versions/{version.name}.json"))
    assert record["state"] == "published" and record["engine_run_id"] == summary.run_id
    assert record["assets"]["mode"] == "blobs" and record["shards"] == 6


def test_a_failed_audit_blocks_publication(dagster_instance, fanout_env):
    asset = rd.build_dataset_asset(defs.frames_pipeline, name="audited", max_missing_fraction=0.0)
    resources = {
        "refiner": rd.RefinerBlobIOManager(
            base_url=fanout_env[defs.BASE_ENV], target_bytes=150, missing_policy="set_null"
        )
    }
    first = dg.materialize([asset], instance=dagster_instance, resources=resources)
    assert first.success
    before = published("audited")

    os.remove(os.path.join(fanout_env[defs.MEDIA_ENV], "frame_005.bin"))
    failed = dg.materialize(
        [asset], instance=dagster_instance, resources=resources, raise_on_error=False
    )
    assert not failed.success
    evaluations = {c.check_name: c for c in failed.get_asset_check_evaluations()}
    missing = evaluations[MISSING_ASSETS_CHECK]
    assert not missing.passed and missing.severity == dg.AssetCheckSeverity.ERROR
    assert evaluations[REFERENCE_INTEGRITY_CHECK].passed
    # readers keep the version they had; the failed run left no materialization
    assert published("audited").name == before.name
    assert [e.asset_key for e in failed.get_asset_materialization_events()] == []
    (failure,) = step_events(failed, "STEP_FAILURE")
    assert failure.step_key == "audited.audited_finalize"
    assert "missing_assets" in str(failure.event_specific_data.error)


def test_multiprocess_gives_the_same_rows_and_bytes(dagster_instance, fanout_env, monkeypatch):
    assert dg.materialize(
        [defs.frames], instance=dagster_instance, resources={"refiner": defs.refiner_resource()}
    ).success
    in_process = rows_of(published("frames"))

    monkeypatch.setenv(defs.BASE_ENV, fanout_env[defs.BASE_ENV] + "-mp")
    with dg.execute_job(
        dg.reconstructable(defs.frames_multiprocess_job), instance=dagster_instance
    ) as result:
        assert result.success
        pids = {e.pid for e in step_events(result, "STEP_START") if "frames_write" in e.step_key}
    version = published("frames")
    assert rows_of(version) == in_process == expected_rows()
    row_pids = {r.pid for r in rd.tables.open_version(version).iter_rows()}
    assert row_pids <= pids and os.getpid() not in row_pids
    assert len(pids) == 3  # a process per write step


def test_write_step_killed_mid_shard_is_retried_and_leaves_no_file(
    dagster_instance, fanout_env, monkeypatch
):
    # row 1 is the second row of shard 00000, the first shard of write step task_00000:
    # its process dies in the middle of that shard, before the step committed anything
    monkeypatch.setenv(defs.FAULT_ENV, "exit:1")
    with dg.execute_job(
        dg.reconstructable(defs.frames_multiprocess_job), instance=dagster_instance
    ) as result:
        assert result.success
        restarts = [e.step_key for e in step_events(result, "STEP_RESTARTED")]
        run_id = result.run_id
    assert restarts == ["frames.frames_write[task_00000]"]
    processed = sorted(
        int(n.split("-")[1]) for n in os.listdir(fanout_env[defs.LOG_ENV]) if n[0].isdigit()
    )
    # the dead try mapped rows 0 and 1; the retry wrote shards 00000 and 00001 again
    assert processed == sorted([0, 1, *range(defs.NUM_ROWS)])

    version = published("frames")
    assert rows_of(version) == expected_rows()
    summary = version.summary()
    dead = attempt_id_for(run_id, "frames.frames_write[task_00000]", 0)
    retry = attempt_id_for(run_id, "frames.frames_write[task_00000]", 1)
    committed = {
        m.shard_id: m.attempt_id for m in manifests.read_manifests(version.output_folder())
    }
    assert committed["00000"] == retry and committed["00001"] == retry
    assert summary.shards == 6
    with open(os.path.join(fanout_env[defs.LOG_ENV], "fault-exit-1")) as f:
        at_death = [p for p in f.read().splitlines() if dead in p]
    # nothing of the dead attempt is left: not what it had written when it died, no
    # table file, asset folder or manifest named for it
    assert [p for p in at_death if os.path.exists(p)] == []
    assert dead not in attempt_ids_in(version)
    assert dead not in committed.values()
    assert attempt_ids_in(version) == set(committed.values())


def test_reexecution_from_failure_writes_only_uncommitted_shards(
    dagster_instance, fanout_env, monkeypatch
):
    # row 7 is in shard 00003, the second shard of write step task_00001 (no retries)
    monkeypatch.setenv(defs.FAULT_ENV, "raise:7")
    log = fanout_env[defs.LOG_ENV]
    with dg.execute_job(
        dg.reconstructable(defs.frames_once_job), instance=dagster_instance
    ) as failed:
        assert not failed.success
        parent = failed.run_id
    storage = defs.refiner_resource().storage()
    assert storage.current(["frames_once"], None) is None  # nothing published
    version = storage.version(["frames_once"], None, f"v-{short_run_id(parent)}")
    first = set(
        integration.choose_committed(
            manifests.read_manifests(version.output_folder()), short_run_id(parent)
        )
    )
    assert first == {"00000", "00001", "00002", "00004", "00005"}
    before = set(os.listdir(log))

    options = dg.ReexecutionOptions.from_failure(parent, dagster_instance)
    with dg.execute_job(
        dg.reconstructable(defs.frames_once_job),
        instance=dagster_instance,
        reexecution_options=options,
    ) as resumed:
        assert resumed.success
        ran = sorted(e.step_key for e in step_events(resumed, "STEP_START"))
        write_output = [
            e for e in step_events(resumed, "STEP_OUTPUT") if "frames_once_write" in e.step_key
        ]
        metadata = write_output[0].event_specific_data.metadata
    assert ran == ["frames_once.frames_once_finalize", "frames_once.frames_once_write[task_00001]"]
    rows_processed = sorted(int(n.split("-")[1]) for n in set(os.listdir(log)) - before)
    assert rows_processed == [6, 7]  # shard 00003 only: 1 of 6 shards written again
    assert metadata["shards_written"].value == 1
    assert metadata["shards_already_committed"].value == 1

    final = published("frames_once")
    assert final.name == version.name  # the same version was finished
    assert rows_of(final) == expected_rows()
    assert final.summary().shards == 6


def test_partitioned_fanout_publishes_and_loads_each_partition(dagster_instance, fanout_env):
    parts = dg.StaticPartitionsDefinition(["a", "b"])
    dataset = rd.build_dataset_asset(
        defs.frames_pipeline, name="episodes", partitions_def=parts, max_tasks=2
    )
    loaded: dict[str, list] = {}

    @dg.asset(partitions_def=parts, io_manager_key="refiner")
    def episodes_tags(context, episodes) -> mdr.Pipeline:
        loaded[context.partition_key] = sorted(r.tag for r in episodes.iter_rows())
        return episodes.map(lambda r: {"n": 1})

    resources = {
        "refiner": rd.RefinerBlobIOManager(
            base_url=fanout_env[defs.BASE_ENV], target_bytes=150, finalize_inline=True
        )
    }
    for key in ("a", "b"):
        result = dg.materialize(
            [dataset, episodes_tags],
            instance=dagster_instance,
            resources=resources,
            partition_key=key,
        )
        assert result.success
    for key in ("a", "b"):
        version = published("episodes", key)
        assert version.partition_key == key
        assert rows_of(version) == expected_rows(key)
        assert loaded[key] == sorted(row[2] for row in expected_rows(key))
        assert published("episodes_tags", key) is not None


def test_time_and_dynamic_partitions(dagster_instance, fanout_env):
    daily = dg.DailyPartitionsDefinition(start_date="2024-01-01")
    dynamic = dg.DynamicPartitionsDefinition(name="robots")
    dagster_instance.add_dynamic_partitions("robots", ["r2d2"])
    resources = {"refiner": defs.refiner_resource()}
    for name, partitions, key in (("daily", daily, "2024-01-02"), ("robots", dynamic, "r2d2")):
        asset = rd.build_dataset_asset(defs.frames_pipeline, name=name, partitions_def=partitions)
        assert dg.materialize(
            [asset], instance=dagster_instance, resources=resources, partition_key=key
        ).success
        assert rows_of(published(name, key)) == expected_rows(key)


def test_run_config_sets_the_fan_out_width(dagster_instance, fanout_env):
    asset = rd.build_dataset_asset(defs.frames_pipeline, name="wide", op_tags={"team": "ml"})
    config = {"ops": {"wide": {"ops": {"wide_plan": {"config": {"max_tasks": 2}}}}}}
    result = dg.materialize(
        [asset],
        instance=dagster_instance,
        resources={"refiner": defs.refiner_resource()},
        run_config=config,
    )
    assert result.success
    writes = {e.step_key for e in step_events(result, "STEP_SUCCESS") if "wide_write" in e.step_key}
    assert len(writes) == 2
    default = rd.build_dataset_asset(defs.frames_pipeline, name="narrow")
    result = dg.materialize(
        [default], instance=dagster_instance, resources={"refiner": defs.refiner_resource()}
    )
    writes = {
        e.step_key for e in step_events(result, "STEP_SUCCESS") if "narrow_write" in e.step_key
    }
    assert len(writes) == 6  # min(shards, 64)
    write_op = asset.node_def.node_dict["wide_write"].definition
    assert write_op.tags["team"] == "ml"


def test_pool_and_static_steps(fanout_env):
    asset = rd.build_dataset_asset(
        defs.frames_pipeline, name="pooled", pool="refiner-writes", static_tasks=4
    )
    nodes = asset.node_def.node_dict
    assert sorted(n for n in nodes if "write" in n) == [f"pooled_write_{i:05d}" for i in range(4)]
    assert {nodes[f"pooled_write_{i:05d}"].definition.pool for i in range(4)} == {"refiner-writes"}
    with pytest.raises(ValueError, match="max_tasks=5 cannot exceed static_tasks=4"):
        rd.build_dataset_asset(defs.frames_pipeline, name="x", static_tasks=4, max_tasks=5)
    with pytest.raises(ValueError, match="max_tasks must be a positive integer"):
        rd.build_dataset_asset(defs.frames_pipeline, name="x", max_tasks=0)


def test_static_write_steps_write_in_process_and_spare_ones_finish_at_once(
    dagster_instance, fanout_env
):
    asset = rd.build_dataset_asset(defs.frames_pipeline, name="fixed", static_tasks=4, max_tasks=2)
    result = dg.materialize(
        [asset], instance=dagster_instance, resources={"refiner": defs.refiner_resource()}
    )
    assert result.success
    written = {
        e.step_key.split(".")[-1]: e.event_specific_data.metadata["shards_written"].value
        for e in step_events(result, "STEP_OUTPUT")
        if "_write_" in e.step_key
    }
    assert written == {
        "fixed_write_00000": 3,
        "fixed_write_00001": 3,
        "fixed_write_00002": 0,
        "fixed_write_00003": 0,
    }
    assert rows_of(published("fixed")) == expected_rows()


def test_the_asset_lands_in_its_group(fanout_env):
    for static_tasks in (None, 2):
        asset = rd.build_dataset_asset(
            defs.frames_pipeline, name="grouped", group_name="robotics", static_tasks=static_tasks
        )
        assert asset.group_names_by_key == {dg.AssetKey("grouped"): "robotics"}
        resources = {"refiner": rd.RefinerBlobIOManager()}
        specs = dg.Definitions(assets=[asset], resources=resources).resolve_all_asset_specs()
        assert [s.group_name for s in specs] == ["robotics"]


def test_a_bad_format_is_refused_when_the_asset_is_built():
    with pytest.raises(ValueError) as caught:
        rd.build_dataset_asset(
            defs.frames_pipeline,
            name="frames",
            key_prefix="robotics",
            metadata={"refiner/format": "csv"},
        )
    message = str(caught.value)
    assert message.startswith("asset robotics/frames: metadata refiner/format='csv'")
    assert "'parquet', 'jsonl', 'lance'" in message
    with pytest.raises(ValueError, match="unknown metadata key 'refiner/fromat'"):
        rd.build_dataset_asset(defs.frames_pipeline, metadata={"refiner/fromat": "jsonl"})
    jsonl = rd.build_dataset_asset(defs.frames_pipeline, metadata={"refiner/format": "jsonl"})
    assert jsonl.key == dg.AssetKey("frames_pipeline")


def test_function_must_return_a_lazy_pipeline(dagster_instance, fanout_env, tmp_path):
    def written(context):
        return mdr.from_items([{"x": 1}]).write_parquet(str(tmp_path / "elsewhere"))

    asset = rd.build_dataset_asset(written, name="written")
    with pytest.raises(TypeError, match="must return the lazy mdr.Pipeline itself"):
        dg.materialize(
            [asset], instance=dagster_instance, resources={"refiner": defs.refiner_resource()}
        )
    assert not (tmp_path / "elsewhere").exists()


def test_io_manager_retry_resumes_its_shards(dagster_instance, fanout_env, monkeypatch):
    """The one-step IO-manager path: a retry of the step skips the shards already written."""
    monkeypatch.setenv(defs.FAULT_ENV, "raise:7")

    @dg.asset(io_manager_key="refiner", retry_policy=dg.RetryPolicy(max_retries=1))
    def frames_io(context) -> mdr.Pipeline:
        return defs.frames_pipeline(context)

    resources = {
        "refiner": rd.RefinerBlobIOManager(
            base_url=fanout_env[defs.BASE_ENV],
            target_bytes=150,
            num_workers=1,
            finalize_inline=True,
        )
    }
    result = dg.materialize([frames_io], instance=dagster_instance, resources=resources)
    assert result.success
    assert [e.step_key for e in step_events(result, "STEP_RESTARTED")] == ["frames_io"]
    processed = sorted(
        int(n.split("-")[1])
        for n in os.listdir(fanout_env[defs.LOG_ENV])
        if not n.startswith("fault")
    )
    # first try: rows 0..7 (row 7 fails shard 00003); retry: shards 00003..00005 only
    assert processed == sorted([*range(8), *range(6, 12)])
    version = published("frames_io")
    assert rows_of(version) == expected_rows()
    assert version.summary().shards == 6


def test_plan_of_10000_shards_yields_at_most_max_tasks_write_steps(dagster_instance, tmp_path):
    index = tmp_path / "index.parquet"
    pq.write_table(pa.table({"i": list(range(20_000))}), index, row_group_size=20_000)

    def many(context) -> mdr.Pipeline:
        return mdr.read_parquet(str(index), num_shards=mdr.MAX_SHARDS)

    asset = rd.build_dataset_asset(many, name="many")
    plan_op = asset.node_def.node_dict["many_plan"].definition
    resources = {"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path / "out"))}
    with dg.build_op_context(resources=resources, instance=dagster_instance) as context:
        plan, *tasks = list(plan_op(context, rd.FanoutConfig()))
    assert plan.value.shards == 10_000 and plan.value.tasks == 64 == len(tasks)
    shard_ids = [s.id for t in tasks for s in t.value.shards]
    assert len(shard_ids) == len(set(shard_ids)) == 10_000
    sizes = {len(t.value.shards) for t in tasks}
    assert max(sizes) - min(sizes) <= 1  # shards spread evenly over the write steps


def test_shards_are_grouped_into_at_most_max_tasks_even_contiguous_steps():
    assert group_shards([], max_tasks=3) == []
    assert group_shards(list(range(5)), max_tasks=8) == [[i] for i in range(5)]
    assert group_shards(list(range(7)), max_tasks=3) == [[0, 1, 2], [3, 4], [5, 6]]
    with pytest.raises(ValueError, match="max_tasks must be a positive integer, got 0"):
        group_shards([1], max_tasks=0)
