"""A misspelt ``dtypes=`` column fails the Dagster materialization, naming the column."""

from __future__ import annotations

import dagster as dg

import refiner_core as mdr
import refiner_dagster as rd

from .test_io_manager import partition_root


def test_a_declared_column_no_row_has_fails_the_materialization(dagster_instance, media):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(media(2))]

    @dg.asset(name="episodes", io_manager_key="refiner")
    def episodes() -> mdr.Pipeline:
        dtypes = {"image": mdr.datatype.image_path(), "episod": mdr.datatype.int32()}
        return mdr.from_items(items, dtypes=dtypes)

    result = dg.materialize(
        [episodes],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
        raise_on_error=False,
    )
    assert not result.success
    [failure] = result.get_step_failure_events()
    error = failure.step_failure_data.error
    text = "\n".join(e.message for e in (error, error.cause) if e is not None)
    assert "dtypes= of from_items declares column 'episod'" in text
    assert "Did you mean 'episode'?" in text
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    assert storage.current(["episodes"], None) is None  # nothing published
