"""Finalization assets: reducer, publish, and exact metadata from the persisted summary."""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd

from .test_io_manager import current_pointer, output_metadata, partition_root


def test_metadata_for_missing_file_under_set_null(dagster_instance, tmp_path):
    # five rows; sizes 4, 5, 6, (missing), 8 bytes; two shards of 3 and 2 rows
    media = tmp_path / "media"
    media.mkdir()
    sizes = {0: 4, 1: 5, 2: 6, 4: 8}
    for i, n in sizes.items():
        (media / f"{i}.png").write_bytes(bytes([65 + i]) * n)
    items = [{"episode": i, "image": str(media / f"{i}.png")} for i in range(5)]

    @dg.asset(
        io_manager_key="refiner",
        metadata={"refiner/missing_policy": "set_null", "refiner/target_bytes": 10},
    )
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(items, items_per_shard=3, dtypes={"image": mdr.datatype.image_path()})

    finalized = rd.build_finalization_asset(episodes)
    result = dg.materialize(
        [episodes, finalized],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=2)},
    )
    assert result.success
    meta = output_metadata(result, "episodes_finalized")
    # shard 0: 4 + 5 bytes fill block 0 (9 <= 10), 6 bytes start block 1; shard 1: one 8-byte block
    expected = {
        "dagster/row_count": 5,
        "rows_read": 5,
        "rows_written": 5,
        "files_written": 2,
        "assets_written": 4,
        "asset_bytes": 23,
        "blocks_written": 3,
        "block_bytes": 23,
        "blobs_coalesced": 0,
        "references_coalesced": 0,
        "bytes_coalesced": 0,
        "ranges_copied": 0,
        "bytes_range_copied": 0,
        "missing_assets": 1,
        "cells_nulled": 1,
        "rows_dropped": 0,
        "rejected_attempts_removed": 0,
        "shards": 2,
        "refiner/missing_policy": "set_null",
        "refiner/format": "parquet",
        "refiner/asset_mode": "blobs",
    }
    assert {k: meta[k] for k in expected} == expected
    pointer = current_pointer(partition_root(dagster_instance, "episodes"))
    assert meta["dagster/uri"] == pointer["url"]
    assert meta["refiner/version"] == pointer["version"]
    table = meta["summary"]
    assert "| Rows written | 5 |" in table
    assert "| Missing assets | 1 |" in table
    assert "| Cells set to null | 1 |" in table
    assert "| Missing policy | `set_null` |" in table

    # the dataset asset's page shows the version as published, not only as written
    written = dagster_instance.get_latest_materialization_event(dg.AssetKey("episodes"))
    state = written.asset_materialization.metadata["refiner/state"].value
    assert state == "written (its finalization asset publishes it)"
    (observed,) = dagster_instance.fetch_observations(dg.AssetKey("episodes"), limit=5).records
    observation = observed.asset_observation.metadata
    assert observation["refiner/state"].value == "published by episodes_finalized"
    assert observation["refiner/version"].value == pointer["version"]

    # the numbers are what the engine persisted, not an in-memory copy
    with open(os.path.join(pointer["url"], "_refiner", "summary.json")) as f:
        persisted = json.load(f)
    engine = {k.removeprefix("refiner/"): v for k, v in expected.items() if "dagster/" not in k}
    assert {k: persisted[k] for k in engine} == engine


def test_coalescing_range_copies_and_rejected_attempt(dagster_instance, tmp_path):
    # a.bin is covered whole by two references (coalesced); b.bin only in part (range copy)
    (tmp_path / "a.bin").write_bytes(b"ABCDEFG")
    (tmp_path / "b.bin").write_bytes(b"0123456789")
    a, b = str(tmp_path / "a.bin"), str(tmp_path / "b.bin")
    items = [
        {"i": 0, "ref": {"path": a, "offset": 0, "size": 3}},
        {"i": 1, "ref": {"path": a, "offset": 3, "size": 4}},
        {"i": 2, "ref": {"path": b, "offset": 2, "size": 3}},
    ]

    def pipeline() -> mdr.Pipeline:
        return mdr.from_items(items, dtypes={"ref": mdr.datatype.blob_reference("file")})

    @dg.asset(io_manager_key="refiner")
    def refs() -> mdr.Pipeline:
        return pipeline()

    finalized = rd.build_finalization_asset(refs, name="refs_published", group_name="media")
    assert finalized.key == dg.AssetKey("refs_published")
    assert finalized.group_names_by_key[finalized.key] == "media"
    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    assert dg.materialize([refs], instance=dagster_instance, resources=resources).success

    # a second attempt of the same shard (a worker that was presumed lost) before finalization
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    [version] = storage.versions(["refs"], None)
    stage = pipeline().write_parquet(version.url, assets=mdr.BlobAssetConfig()).stages[0]
    stage.run_task(stage.plan(run_id=version.engine_run_id), run_id=version.engine_run_id)
    assert len(os.listdir(os.path.join(version.url, "_refiner", "attempts"))) == 2

    result = dg.materialize(
        [refs, finalized], instance=dagster_instance, resources=resources, selection=[finalized]
    )
    assert result.success
    meta = output_metadata(result, "refs_published")
    expected = {
        "rows_written": 3,
        "assets_written": 3,
        "blocks_written": 1,
        "block_bytes": 10,
        "blobs_coalesced": 1,
        "references_coalesced": 2,
        "bytes_coalesced": 7,
        "ranges_copied": 1,
        "bytes_range_copied": 3,
        "missing_assets": 0,
        "cells_nulled": 0,
        "rows_dropped": 0,
        "rejected_attempts_removed": 1,
    }
    assert {k: meta[k] for k in expected} == expected
    assert meta["files_removed"] == 2  # the rejected attempt's table file and block folder
    assert "| Rejected attempts removed | 1 |" in meta["summary"]
    assert len(os.listdir(os.path.join(version.url, "_refiner", "attempts"))) == 1
    rows = sorted(mdr.read_parquet(version.url).iter_rows(), key=lambda r: r.i)
    assert [mdr.read_blob(r.ref) for r in rows] == [b"ABC", b"DEFG", b"234"]


def test_finalization_is_idempotent_and_inline_mode(dagster_instance, media):
    files = media(2)
    items = [{"episode": i, "image": p} for i, (p, _) in enumerate(files)]

    @dg.asset(io_manager_key="refiner", metadata={"refiner/finalize_inline": True})
    def inline() -> mdr.Pipeline:
        return mdr.from_items(items, dtypes={"image": mdr.datatype.image_path()})

    seen: dict = {}

    @dg.asset(ins={"table": dg.AssetIn(key="inline")})
    def reader(table) -> None:
        seen["rows"] = table.materialize()

    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    result = dg.materialize([inline, reader], instance=dagster_instance, resources=resources)
    assert result.success
    meta = output_metadata(result, "inline")
    assert meta["refiner/state"] == "published" and meta["rows_written"] == 2
    assert [mdr.read_blob(r.image) for r in seen["rows"]] == [d for _, d in files]

    # finalizing the published version again changes nothing
    finalized = rd.build_finalization_asset(inline)
    again = dg.materialize(
        [inline, finalized], instance=dagster_instance, resources=resources, selection=[finalized]
    )
    assert again.success
    assert output_metadata(again, "inline_finalized")["rows_written"] == 2
    assert (
        current_pointer(partition_root(dagster_instance, "inline"))["version"]
        == meta["refiner/version"]
    )


def test_an_older_version_never_replaces_a_newer_published_one(dagster_instance, media):
    files = media(1)

    @dg.asset(io_manager_key="refiner")
    def clips() -> mdr.Pipeline:
        return mdr.from_items([{"image": files[0][0]}], dtypes={"image": mdr.datatype.image_path()})

    resources = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    assert dg.materialize([clips], instance=dagster_instance, resources=resources).success
    [older] = storage.versions(["clips"], None)
    assert dg.materialize([clips], instance=dagster_instance, resources=resources).success
    newer = storage.pending(["clips"], None)
    assert newer.name != older.name

    writer = resources["refiner"].writer(dagster_instance)
    writer.finalize(newer)
    assert storage.current(["clips"], None).name == newer.name
    assert [v.name for v in storage.versions(["clips"], None)] == [newer.name]
    with pytest.raises(RuntimeError, match="superseded"):
        writer.finalize(older)
    assert storage.current(["clips"], None).name == newer.name
