"""One write path: the IO managers, the fan-out steps and the finalization assets all
write, finalize, audit and publish through the IO manager's ``DatasetWriter``."""

from __future__ import annotations

from typing import Any, ClassVar

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.publish import AuditPolicy


class _RecordingWriter(rd.DatasetWriter):
    """A real writer that also notes which of its methods each path called."""

    calls: ClassVar[list[str]] = []

    def begin(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("begin")
        return super().begin(*args, **kwargs)

    def write(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("write")
        return super().write(*args, **kwargs)

    def write_shards(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("write_shards")
        return super().write_shards(*args, **kwargs)

    def finalize(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("finalize")
        return super().finalize(*args, **kwargs)


class _RecordingIOManager(rd.RefinerBlobIOManager):
    def writer(self, instance: dg.DagsterInstance | None = None) -> rd.DatasetWriter:
        real = super().writer(instance)
        return _RecordingWriter(
            real.storage, real.form, real.defaults, real.source_storage_options, real.instance
        )


def _rows(media: list[tuple[str, bytes]]) -> mdr.Pipeline:
    return mdr.from_items(
        [{"i": i, "image": path} for i, (path, _) in enumerate(media)],
        items_per_shard=2,
        dtypes={"image": mdr.datatype.image_path()},
    )


def test_io_manager_fanout_and_finalization_share_the_writer(dagster_instance, media):
    files = media(4)

    @dg.asset(io_manager_key="refiner")
    def one_step() -> mdr.Pipeline:
        return _rows(files)

    fanned = rd.build_dataset_asset(lambda context: _rows(files), name="fanned", max_tasks=2)
    assets = [one_step, rd.build_finalization_asset(one_step), fanned]
    resources = {"refiner": _RecordingIOManager(num_workers=1)}
    calls = _RecordingWriter.calls
    calls.clear()

    assert dg.materialize(assets[:2], instance=dagster_instance, resources=resources).success
    assert calls == ["begin", "write", "finalize"]  # IO manager, then finalization asset
    calls.clear()
    assert dg.materialize([fanned], instance=dagster_instance, resources=resources).success
    assert calls == ["begin", "write_shards", "write_shards", "finalize"]

    storage = resources["refiner"].writer(dagster_instance).storage
    for name in ("one_step", "fanned"):
        version = storage.current([name], None)
        assert version is not None and version.summary().counters["assets_written"] == 4


def test_a_step_whose_key_is_not_a_refiner_io_manager_says_which_and_how_to_fix(
    dagster_instance, tmp_path
):
    asset = rd.build_dataset_asset(lambda context: mdr.from_items([{"a": 1}]), name="plain")
    result = dg.materialize(
        [asset],
        instance=dagster_instance,
        resources={"refiner": dg.FilesystemIOManager(base_dir=str(tmp_path))},
        raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error)
    assert "asset plain: resource 'refiner' is a PickledObjectFilesystemIOManager" in message
    assert "not a refiner IO manager" in message
    assert "rd.RefinerBlobIOManager()" in message


def test_a_failed_audit_leaves_nothing_published_then_a_clean_finalize_publishes(
    dagster_instance, media
):
    files = media(4)
    gone = files[0][0] + ".gone"
    rows = mdr.from_items(
        [{"i": 0, "image": gone}, *({"i": i, "image": p} for i, (p, _) in enumerate(files))],
        dtypes={"image": mdr.datatype.image_path()},
    )
    writer = rd.RefinerBlobIOManager(num_workers=1, missing_policy="set_null").writer(
        dagster_instance
    )
    key = dg.AssetKey(["audited"])
    version, _, assets = writer.begin(key, None, "1" * 32, {})
    counters = writer.write(version, rows, assets)
    assert counters["rows_written"] == 5

    with pytest.raises(rd.AuditFailedError, match="missing_assets") as failed:
        writer.finalize(version, audit=AuditPolicy(max_missing_fraction=0.1))
    assert failed.value.failed == ["missing_assets"]
    assert writer.storage.current(["audited"], None) is None  # readers see nothing

    done = writer.finalize(version, audit=AuditPolicy(max_missing_fraction=0.5))
    assert done.summary.counters["missing_assets"] == 1
    published = writer.storage.current(["audited"], None)
    assert published is not None and published.name == version.name
    images = [row.image for row in mdr.read_parquet(published.url).iter_rows()]
    assert images.count(None) == 1
    assert sorted(mdr.read_blob(i) for i in images if i is not None) == sorted(
        data for _, data in files
    )
