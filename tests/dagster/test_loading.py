"""What an input receives: picked by its annotation; columns and missing partitions."""

from __future__ import annotations

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd

from .test_io_manager import partition_root

RESOURCES = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}


def _episodes(media, *, fmt="parquet", partitions_def=None):
    files = media(2)

    @dg.asset(
        io_manager_key="refiner",
        metadata={"refiner/format": fmt, "refiner/finalize_inline": True},
        partitions_def=partitions_def,
    )
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(
            [{"episode": i, "task": f"t{i}", "image": p} for i, (p, _) in enumerate(files)],
            dtypes={"image": mdr.datatype.image_path()},
        )

    return episodes


def test_the_annotation_picks_table_or_version(dagster_instance, media):
    episodes = _episodes(media)
    seen: dict = {}

    @dg.asset(ins={"handle": dg.AssetIn(key="episodes")})
    def by_version(handle: rd.DatasetVersion) -> None:
        seen["version"] = handle

    @dg.asset(ins={"table": dg.AssetIn(key="episodes")})
    def by_table(table: mdr.Pipeline) -> None:
        seen["rows"] = table.materialize()

    result = dg.materialize(
        [episodes, by_version, by_table], instance=dagster_instance, resources=RESOURCES
    )
    assert result.success
    assert isinstance(seen["version"], rd.DatasetVersion)
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    assert seen["version"].name == storage.current(["episodes"], None).name
    assert sorted(r.episode for r in seen["rows"]) == [0, 1]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_columns_input_metadata(dagster_instance, media, fmt):
    episodes = _episodes(media, fmt=fmt)
    seen: dict = {}

    @dg.asset(ins={"table": dg.AssetIn(key="episodes", metadata={"columns": ["episode", "task"]})})
    def narrow(table: mdr.Pipeline) -> None:
        seen["rows"] = table.materialize()

    assert dg.materialize(
        [episodes, narrow], instance=dagster_instance, resources=RESOURCES
    ).success
    assert [sorted(r.keys()) for r in seen["rows"]] == [["episode", "task"]] * 2

    @dg.asset(ins={"table": dg.AssetIn(key="episodes", metadata={"columns": ["episdoe"]})})
    def typo(table: mdr.Pipeline) -> None:
        table.materialize()

    result = dg.materialize(
        [episodes, typo],
        instance=dagster_instance,
        resources=RESOURCES,
        selection=[typo],
        raise_on_error=False,
    )
    [failure] = result.get_step_failure_events()
    text = str(failure.step_failure_data.error.cause or failure.step_failure_data.error)
    assert "['episdoe']" in text and "'episode'" in text


def test_allow_missing_partitions(dagster_instance, media):
    parts = dg.StaticPartitionsDefinition(["a", "b", "c"])
    episodes = _episodes(media, partitions_def=parts)
    seen: dict = {}

    @dg.asset(
        ins={
            "tables": dg.AssetIn(
                key="episodes",
                metadata={"allow_missing_partitions": True},
                partition_mapping=dg.AllPartitionMapping(),
            )
        }
    )
    def combined(tables: dict[str, mdr.Pipeline]) -> None:
        seen["keys"] = sorted(tables)

    @dg.asset(
        ins={"tables": dg.AssetIn(key="episodes", partition_mapping=dg.AllPartitionMapping())}
    )
    def strict(tables: dict[str, mdr.Pipeline]) -> None: ...

    for key in ("a", "c"):
        run = dg.materialize(
            [episodes], instance=dagster_instance, resources=RESOURCES, partition_key=key
        )
        assert run.success
    everything = [episodes, combined, strict]
    result = dg.materialize(
        everything, instance=dagster_instance, resources=RESOURCES, selection=[combined]
    )
    assert result.success and seen["keys"] == ["a", "c"]
    failed = dg.materialize(
        everything,
        instance=dagster_instance,
        resources=RESOURCES,
        selection=[strict],
        raise_on_error=False,
    )
    assert not failed.success
