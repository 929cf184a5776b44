"""Asset checks: missing-asset outcome and reference integrity, on published versions."""

from __future__ import annotations

import os

import dagster as dg
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.checks import MISSING_ASSETS_CHECK, REFERENCE_INTEGRITY_CHECK

from .test_io_manager import current_pointer, partition_root


def dataset(files, *, policy="error", name="episodes", fmt="parquet", **check_options):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(files)]
    metadata = {"refiner/missing_policy": policy, "refiner/format": fmt}

    @dg.asset(name=name, io_manager_key="refiner", metadata=metadata)
    def _dataset() -> mdr.Pipeline:
        return mdr.from_items(items, items_per_shard=2, dtypes={"image": mdr.datatype.image_path()})

    # standalone checks on the published version (the finalization itself does not audit)
    finalized = rd.build_finalization_asset(_dataset, checks=False)
    return [_dataset, finalized], rd.build_dataset_checks(finalized, **check_options)


def evaluations(result) -> dict:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def run(instance, assets, checks, manager=None, **kwargs):
    return dg.materialize(
        [*assets, *checks],
        instance=instance,
        resources={"refiner": manager or rd.RefinerBlobIOManager(num_workers=1)},
        **kwargs,
    )


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "lance"])
def test_checks_pass_on_a_clean_dataset(dagster_instance, media, fmt):
    assets, checks = dataset(media(5), fmt=fmt)
    assert [c.check_key.asset_key for c in checks] == [dg.AssetKey("episodes_finalized")] * 2
    result = run(dagster_instance, assets, checks)
    assert result.success
    found = evaluations(result)
    assert set(found) == {MISSING_ASSETS_CHECK, REFERENCE_INTEGRITY_CHECK}
    missing = found[MISSING_ASSETS_CHECK]
    assert missing.passed and missing.metadata["missing_assets"].value == 0
    integrity = found[REFERENCE_INTEGRITY_CHECK]
    assert integrity.passed
    meta = {k: v.value for k, v in integrity.metadata.items()}
    assert meta["references_total"] == 5 and meta["references_checked"] == 5
    assert meta["sampling_rate"] == 1.0 and meta["failures"] == 0
    assert meta["blocks_checked"] == 3  # one block per shard


@pytest.mark.parametrize(("policy", "nulled", "dropped"), [("set_null", 1, 0), ("drop_row", 0, 1)])
def test_missing_assets_warn_with_counts(dagster_instance, media, policy, nulled, dropped):
    files = media(4)
    os.remove(files[1][0])
    assets, checks = dataset(files, policy=policy)
    result = run(dagster_instance, assets, checks)
    assert result.success  # WARN does not fail the run
    check = evaluations(result)[MISSING_ASSETS_CHECK]
    assert not check.passed
    assert check.severity == dg.AssetCheckSeverity.WARN
    meta = {k: v.value for k, v in check.metadata.items()}
    assert meta == {
        "missing_assets": 1,
        "cells_nulled": nulled,
        "rows_dropped": dropped,
        "missing_policy": policy,
    }
    # null cells are not broken references
    assert evaluations(result)[REFERENCE_INTEGRITY_CHECK].passed


def test_integrity_fails_on_a_corrupted_reference(dagster_instance, media):
    assets, checks = dataset(media(4))
    assert run(dagster_instance, assets, checks).success

    version_dir = current_pointer(partition_root(dagster_instance, "episodes"))["url"]
    data_file = sorted(f for f in os.listdir(version_dir) if f.endswith(".parquet"))[0]
    path = os.path.join(version_dir, data_file)
    table = pq.read_table(path)
    rows = table.to_pylist()
    block_size = os.path.getsize(rows[0]["image"]["path"])
    rows[0]["image"] = {**rows[0]["image"], "offset": block_size - 1, "size": 2}
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), path)

    result = run(
        dagster_instance,
        assets,
        checks,
        selection=dg.AssetSelection.checks(*checks),
        raise_on_error=False,
    )
    check = evaluations(result)[REFERENCE_INTEGRITY_CHECK]
    assert not check.passed
    assert check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["failures"].value == 1
    detail = check.metadata["first_failures"].value
    assert "column 'image'" in detail and f"reaches past the block's {block_size} bytes" in detail

    # a deleted block is reported too
    os.remove(rows[1]["image"]["path"])
    result = run(dagster_instance, assets, checks, selection=dg.AssetSelection.checks(*checks))
    check = evaluations(result)[REFERENCE_INTEGRITY_CHECK]
    assert not check.passed and "does not exist" in check.metadata["first_failures"].value


def test_integrity_samples_large_datasets(dagster_instance, media):
    assets, checks = dataset(media(6), sample_threshold=4, sample_size=3)
    result = run(dagster_instance, assets, checks)
    meta = {k: v.value for k, v in evaluations(result)[REFERENCE_INTEGRITY_CHECK].metadata.items()}
    assert meta["references_total"] == 6
    assert meta["references_checked"] == 3
    assert meta["sampling_rate"] == 0.5


def test_integrity_for_copied_files(dagster_instance, media):
    assets, checks = dataset(media(3))
    result = run(dagster_instance, assets, checks, manager=rd.RefinerFileIOManager(num_workers=1))
    assert evaluations(result)[REFERENCE_INTEGRITY_CHECK].passed
    rows = mdr.read_parquet(
        current_pointer(partition_root(dagster_instance, "episodes"))["url"]
    ).materialize()
    os.remove(rows[0].image)
    result = run(
        dagster_instance,
        assets,
        checks,
        manager=rd.RefinerFileIOManager(num_workers=1),
        selection=dg.AssetSelection.checks(*checks),
    )
    check = evaluations(result)[REFERENCE_INTEGRITY_CHECK]
    assert not check.passed and "file" in check.metadata["first_failures"].value


def test_checks_need_one_refiner_asset(media):
    [episodes, _], _ = dataset(media(1))
    with pytest.raises(TypeError, match="build_finalization_asset"):
        rd.build_dataset_checks("episodes_finalized")
    # a dataset asset itself (published inline) gets the checks on its own key
    assert {c.check_key.asset_key for c in rd.build_dataset_checks(episodes)} == {episodes.key}


def test_checks_follow_the_partitions(dagster_instance, media):
    files = media(2)
    parts = dg.StaticPartitionsDefinition(["a", "b"])

    @dg.asset(io_manager_key="refiner", partitions_def=parts)
    def shots(context) -> mdr.Pipeline:
        index = 0 if context.partition_key == "a" else 1
        return mdr.from_items(
            [{"image": files[index][0]}], dtypes={"image": mdr.datatype.image_path()}
        )

    finalized = rd.build_finalization_asset(shots, checks=False)
    checks = rd.build_dataset_checks(finalized)
    result = run(dagster_instance, [shots, finalized], checks, partition_key="b")
    found = evaluations(result)
    assert all(e.passed for e in found.values())
    assert {e.partition for e in found.values()} == {"b"}
    assert found[REFERENCE_INTEGRITY_CHECK].metadata["references_total"].value == 1
