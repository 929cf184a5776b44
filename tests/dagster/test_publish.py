"""Write → audit → publish: the pointer moves only after the checks passed."""

from __future__ import annotations

import datetime
import os

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.finalization import dataset_pool
from refiner_dagster.storage import WRITTEN

from .test_io_manager import current_pointer, output_metadata, partition_root


def _dataset(files, *, policy="error", name="episodes", partitions_def=None):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(files)]

    @dg.asset(
        name=name,
        io_manager_key="refiner",
        metadata={"refiner/missing_policy": policy},
        partitions_def=partitions_def,
    )
    def _episodes() -> mdr.Pipeline:
        return mdr.from_items(items, items_per_shard=2, dtypes={"image": mdr.datatype.image_path()})

    return _episodes


def _failure_message(result: dg.ExecuteInJobResult) -> str:
    [failure] = result.get_step_failure_events()
    return failure.step_failure_data.error.message


RESOURCES = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}


def test_a_corrupted_block_is_never_published(dagster_instance, media):
    files = media(4)
    episodes = _dataset(files)
    finalized = rd.build_finalization_asset(episodes)
    seen: dict = {}

    @dg.asset(ins={"table": dg.AssetIn(key="episodes_finalized")})
    def reader(table: mdr.Pipeline) -> None:
        seen["rows"] = sorted(table.iter_rows(), key=lambda r: r.episode)

    everything = [episodes, finalized, reader]
    first = dg.materialize(everything, instance=dagster_instance, resources=RESOURCES)
    assert first.success
    root = partition_root(dagster_instance, "episodes")
    published = current_pointer(root)["version"]
    first_rows = [mdr.read_blob(r.image) for r in seen["rows"]]
    assert first_rows == [data for _, data in files]

    # a new version is written; one of its blocks is cut short before finalization
    write = dg.materialize(
        everything, instance=dagster_instance, resources=RESOURCES, selection=[episodes]
    )
    assert write.success
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    pending = storage.pending(["episodes"], None)
    assert pending.state == WRITTEN and pending.name != published
    blocks = sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(os.path.join(pending.url, "assets"))
        for name in names
    )
    with open(blocks[0], "r+b") as f:
        f.truncate(1)

    result = dg.materialize(
        everything,
        instance=dagster_instance,
        resources=RESOURCES,
        selection=[finalized],
        raise_on_error=False,
    )
    assert not result.success
    message = _failure_message(result)
    assert "reference_integrity" in message and "was not published" in message
    assert f"Readers still see version {published}" in message
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not checks["reference_integrity"].passed
    assert checks["reference_integrity"].severity == dg.AssetCheckSeverity.ERROR
    assert checks["missing_assets"].passed
    assert not [
        m for m in result.get_asset_materialization_events() if m.asset_key == finalized.key
    ]

    # the pointer did not move, and a downstream asset still reads the previous rows
    assert current_pointer(root)["version"] == published
    seen.clear()
    again = dg.materialize(
        everything, instance=dagster_instance, resources=RESOURCES, selection=[reader]
    )
    assert again.success
    assert [mdr.read_blob(r.image) for r in seen["rows"]] == first_rows


@pytest.mark.parametrize(("threshold", "published"), [(0.1, False), (0.5, True)])
def test_missing_fraction_threshold(dagster_instance, media, threshold, published):
    files = media(4)
    os.remove(files[1][0])  # 1 of 4 source assets missing: 25 %
    episodes = _dataset(files, policy="set_null")
    finalized = rd.build_finalization_asset(episodes, max_missing_fraction=threshold)
    result = dg.materialize(
        [episodes, finalized], instance=dagster_instance, resources=RESOURCES, raise_on_error=False
    )
    check = {e.check_name: e for e in result.get_asset_check_evaluations()}["missing_assets"]
    assert not check.passed
    assert check.metadata["missing_fraction"].value == 0.25
    root = partition_root(dagster_instance, "episodes")
    if published:
        assert result.success
        assert check.severity == dg.AssetCheckSeverity.WARN
        assert current_pointer(root)["rows_written"] == 4
    else:
        assert not result.success
        assert check.severity == dg.AssetCheckSeverity.ERROR
        assert "above max_missing_fraction=0.1" in check.description
        assert "missing_assets" in _failure_message(result)
        assert not os.path.exists(os.path.join(root, "_current.json"))


def test_finalization_has_standard_table_metadata(dagster_instance, media):
    files = media(3)
    episodes = _dataset(files)
    finalized = rd.build_finalization_asset(episodes)
    result = dg.materialize([episodes, finalized], instance=dagster_instance, resources=RESOURCES)
    assert result.success
    meta = output_metadata(result, "episodes_finalized")
    root = partition_root(dagster_instance, "episodes")
    assert meta["dagster/table_name"] == "episodes"  # a dotted name, not a folder
    assert meta["dagster/uri"] == current_pointer(root)["url"]
    assert meta["refiner/dataset_folder"] == root
    assert meta["dagster/row_count"] == 3
    columns = {c.name: c for c in meta["dagster/column_schema"].columns}
    assert columns["episode"].type == "int64"
    assert columns["image"].type == "image blob reference"
    assert columns["image"].tags == {"refiner/asset": "image", "refiner/asset_form": "blob"}
    assert isinstance(meta["block_bytes"], int)
    assert "KiB" in meta["summary"] or " B)" in meta["summary"]

    # partitioned: the partition's row count, the same table name for every partition
    parts = dg.StaticPartitionsDefinition(["a", "b"])
    shots = _dataset(files[:2], name="shots", partitions_def=parts)
    shots_final = rd.build_finalization_asset(shots)
    names = set()
    for key in ("a", "b"):
        run = dg.materialize(
            [shots, shots_final], instance=dagster_instance, resources=RESOURCES, partition_key=key
        )
        part = output_metadata(run, "shots_finalized")
        assert part["dagster/partition_row_count"] == 2 and "dagster/row_count" not in part
        names.add(part["dagster/table_name"])
        assert part["refiner/dataset_folder"] == partition_root(dagster_instance, "shots", key)
    assert names == {"shots"}


def test_eager_finalization_follows_a_write(dagster_instance, media):
    episodes = _dataset(media(1))
    finalized = rd.build_finalization_asset(episodes)
    assert finalized.automation_conditions_by_key[finalized.key] == dg.AutomationCondition.eager()
    manual = rd.build_finalization_asset(episodes, name="manual", automation_condition=None)
    assert manual.automation_conditions_by_key.get(manual.key) is None

    defs = dg.Definitions(assets=[episodes, finalized], resources=RESOURCES)
    now = datetime.datetime.now(datetime.UTC)
    idle = dg.evaluate_automation_conditions(
        defs=defs, instance=dagster_instance, evaluation_time=now
    )
    assert dg.materialize([episodes], instance=dagster_instance, resources=RESOURCES).success
    tick = dg.evaluate_automation_conditions(
        defs=defs,
        instance=dagster_instance,
        cursor=idle.cursor,
        evaluation_time=now + datetime.timedelta(seconds=30),
    )
    assert tick.get_requested_partitions(finalized.key) == {None}
    assert tick.get_num_requested(episodes.key) == 0


def test_usual_asset_arguments_and_default_pool(media):
    episodes = _dataset(media(1))
    finalized = rd.build_finalization_asset(
        episodes,
        owners=["team:robotics"],
        tags={"tier": "gold"},
        op_tags={"dagster/max_retries": "2"},
        code_version="7",
        kinds={"refiner", "parquet"},
        group_name="media",
        description="Published episodes.",
    )
    spec = finalized.specs_by_key[finalized.key]
    assert spec.owners == ["team:robotics"]
    assert spec.tags["tier"] == "gold"
    assert spec.code_version == "7"
    assert spec.group_name == "media" and spec.description == "Published episodes."
    assert {"dagster/kind/refiner", "dagster/kind/parquet"} <= set(spec.tags)
    assert finalized.op.tags["dagster/max_retries"] == "2"
    assert finalized.op.pool == "refiner/episodes" == dataset_pool(episodes.key)
    assert rd.build_finalization_asset(episodes, name="free", pool=None).op.pool is None


def test_multi_partition_backfills_are_refused_at_definition(media):
    daily = dg.DailyPartitionsDefinition(start_date="2024-01-01")

    @dg.asset(
        io_manager_key="refiner",
        partitions_def=daily,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def days() -> mdr.Pipeline:
        return mdr.from_items([{"x": 1}])

    with pytest.raises(dg.DagsterInvalidDefinitionError, match="one version per partition"):
        rd.build_finalization_asset(days)
    episodes = _dataset(media(1), partitions_def=daily)
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="max_partitions_per_run=1"):
        rd.build_finalization_asset(episodes, backfill_policy=dg.BackfillPolicy.single_run())
    one = rd.build_finalization_asset(episodes, backfill_policy=dg.BackfillPolicy.multi_run(1))
    assert one.backfill_policy == dg.BackfillPolicy.multi_run(1)


def test_forgotten_io_manager_key_names_the_fix(dagster_instance):
    @dg.asset  # no io_manager_key: the default IO manager pickles the lazy pipeline
    def loose() -> mdr.Pipeline:
        return mdr.from_items([{"x": 1}])

    finalized = rd.build_finalization_asset(loose)
    result = dg.materialize([loose, finalized], instance=dagster_instance, raise_on_error=False)
    assert not result.success
    message = _failure_message(result)
    assert "io_manager_key='refiner'" in message and "RefinerBlobIOManager" in message
    assert "'io_manager' is not bound to a refiner IO manager" in message


def test_checks_on_an_inline_finalized_dataset(dagster_instance, media):
    files = media(3)
    os.remove(files[0][0])
    items = [{"episode": i, "image": p} for i, (p, _) in enumerate(files)]

    @dg.asset(
        io_manager_key="refiner",
        metadata={"refiner/finalize_inline": True, "refiner/missing_policy": "set_null"},
    )
    def inline() -> mdr.Pipeline:
        return mdr.from_items(items, dtypes={"image": mdr.datatype.image_path()})

    checks = rd.build_dataset_checks(inline, max_missing_fraction=0.5)
    assert {c.check_key.asset_key for c in checks} == {inline.key}
    result = dg.materialize([inline, *checks], instance=dagster_instance, resources=RESOURCES)
    assert result.success
    found = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert found["reference_integrity"].passed
    assert found["reference_integrity"].metadata["references_total"].value == 2
    assert not found["missing_assets"].passed
    assert found["missing_assets"].severity == dg.AssetCheckSeverity.WARN
    meta = output_metadata(result, "inline")
    assert meta["refiner/state"] == "published"
    assert meta["dagster/column_schema"].columns[1].type == "image blob reference"


def test_checks_on_an_auditing_finalization_are_not_duplicated(media):
    finalized = rd.build_finalization_asset(_dataset(media(1)))
    assert rd.build_dataset_checks(finalized) == []
    with pytest.raises(ValueError, match="pass sample_threshold"):
        rd.build_dataset_checks(finalized, sample_threshold=10)
