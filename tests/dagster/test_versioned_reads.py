"""``mdr.read_parquet`` on a Dagster dataset's folder reads what the dataset published:
a newer version written but not yet finalized, audited and published stays out of it
until asked for by name."""

from __future__ import annotations

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_core.io import UnknownVersion

from .test_io_manager import current_pointer, partition_root

RESOURCES = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}


def test_a_written_but_unpublished_version_is_not_read(dagster_instance):
    batches = [[{"i": i} for i in range(3)], [{"i": i} for i in range(10, 14)]]

    @dg.asset(name="episodes", io_manager_key="refiner")
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(batches.pop(0))

    finalized = rd.build_finalization_asset(episodes)
    assert dg.materialize([episodes, finalized], instance=dagster_instance, resources=RESOURCES)
    written = dg.materialize(
        [episodes, finalized], instance=dagster_instance, resources=RESOURCES, selection=[episodes]
    )
    assert written.success
    root = partition_root(dagster_instance, "episodes")
    published = current_pointer(root)["version"]
    pending = rd.DatasetStorage(partition_root(dagster_instance)).pending(["episodes"], None)
    assert pending is not None and pending.name != published

    def ids(pipeline: mdr.Pipeline) -> list[int]:
        return sorted(row["i"] for row in pipeline.iter_rows())

    assert ids(mdr.read_parquet(root)) == [0, 1, 2]
    # not finalized yet: asked for by name, it is read only with uncommitted=True
    with pytest.raises(mdr.UncommittedOutput, match=pending.name):
        mdr.read_parquet(root, version=pending.name).plan()
    newer = mdr.read_parquet(root, version=pending.name, uncommitted=True)
    assert ids(newer) == [10, 11, 12, 13]
    with pytest.raises(UnknownVersion, match=f"{published} \\(published\\)"):
        mdr.read_parquet(root, version="v-000000000000").plan()
