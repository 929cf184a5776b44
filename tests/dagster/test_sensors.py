"""The source sensor: one run per new or changed file, a JSON cursor, pagination, S3."""

import json
import os
from pathlib import Path

import dagster as dg
import pytest
import s3fs

from refiner_dagster.sensors import (
    SOURCE_PATH_TAG,
    SOURCE_URL_TAG,
    SOURCE_VERSION_TAG,
    SourceCursor,
    build_source_sensor,
    list_source_files,
)

DROPS = dg.DynamicPartitionsDefinition(name="test_source_files")


@dg.asset
def refreshed() -> None:
    """Stands in for the dataset a new source file refreshes."""


@dg.asset(partitions_def=DROPS)
def per_file(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"file": context.partition_key})


def tick(sensor: dg.SensorDefinition, cursor: str | None, instance=None) -> dg.SensorResult:
    result = sensor(dg.build_sensor_context(cursor=cursor, instance=instance))
    assert isinstance(result, dg.SensorResult)
    assert result.cursor is not None
    json.loads(result.cursor)  # always valid JSON
    return result


def requested(result: dg.SensorResult) -> list[str]:
    return [r.tags[SOURCE_PATH_TAG] for r in result.run_requests or []]


def write(path: Path, data: bytes, mtime: float | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_new_same_changed_local(tmp_path: Path) -> None:
    sensor = build_source_sensor(name="drops", url=str(tmp_path), target=[refreshed])
    with dg.instance_for_test() as instance:
        empty = tick(sensor, None, instance)
        assert requested(empty) == []

        write(tmp_path / "a.parquet", b"one", mtime=1_700_000_000)
        first = tick(sensor, empty.cursor, instance)
        assert requested(first) == ["a.parquet"]
        (request,) = first.run_requests
        assert request.run_key == "a.parquet@s3-m1700000000000000"
        assert request.tags[SOURCE_URL_TAG] == str(tmp_path / "a.parquet")
        assert request.tags[SOURCE_VERSION_TAG] == "s3-m1700000000000000"

        # Same file, cursor carried over: nothing, on any number of ticks.
        again = tick(sensor, first.cursor, instance)
        assert requested(again) == []
        assert requested(tick(sensor, again.cursor, instance)) == []

        # Same size, new mtime: a new version and a new run key.
        write(tmp_path / "a.parquet", b"uno", mtime=1_700_000_060)
        changed = tick(sensor, again.cursor, instance)
        assert [r.run_key for r in changed.run_requests] == ["a.parquet@s3-m1700000060000000"]

        # New content size with the same mtime is a change too.
        write(tmp_path / "a.parquet", b"longer", mtime=1_700_000_060)
        resized = tick(sensor, changed.cursor, instance)
        assert [r.run_key for r in resized.run_requests] == ["a.parquet@s6-m1700000060000000"]
        assert requested(tick(sensor, resized.cursor, instance)) == []


def test_cursor_survives_and_is_plain_json(tmp_path: Path) -> None:
    sensor = build_source_sensor(name="drops", url=str(tmp_path), target=[refreshed])
    write(tmp_path / "x.parquet", b"x")
    write(tmp_path / "sub" / "y.parquet", b"yy")
    with dg.instance_for_test() as instance:
        first = tick(sensor, None, instance)
        assert requested(first) == ["x.parquet", "sub/y.parquet"]  # oldest first
        saved = json.loads(first.cursor)
        assert saved["v"] == 2
        assert saved["mark"] == max(
            os.path.getmtime(p) for p in (tmp_path / "x.parquet", tmp_path / "sub" / "y.parquet")
        )
        assert set(saved["recent"]) == {"sub/y.parquet", "x.parquet"}

    # A different instance (a restarted daemon) with the stored cursor requests nothing.
    with dg.instance_for_test() as other:
        assert requested(tick(sensor, first.cursor, other)) == []

    # Deleting a file forgets it; putting it back is processed again.
    (tmp_path / "x.parquet").unlink()
    gone = tick(sensor, first.cursor)
    assert set(json.loads(gone.cursor)["recent"]) == {"sub/y.parquet"}
    write(tmp_path / "x.parquet", b"x")
    assert requested(tick(sensor, gone.cursor)) == ["x.parquet"]


def test_pattern_hidden_and_partial_files(tmp_path: Path) -> None:
    write(tmp_path / "keep.parquet", b"k")
    write(tmp_path / "notes.txt", b"n")
    write(tmp_path / "_SUCCESS", b"")
    write(tmp_path / ".tmp" / "writing.parquet", b"w")
    write(tmp_path / "_staging" / "z.parquet", b"z")
    sensor = build_source_sensor(
        name="drops", url=str(tmp_path), target=[refreshed], pattern="*.parquet"
    )
    assert requested(tick(sensor, None)) == ["keep.parquet"]

    settled = build_source_sensor(
        name="settled", url=str(tmp_path), target=[refreshed], min_age_seconds=3600
    )
    write(tmp_path / "old.parquet", b"o", mtime=1_000_000)
    assert requested(tick(settled, None)) == ["old.parquet"]


def test_pagination_across_ticks(tmp_path: Path) -> None:
    for i in range(5):
        write(tmp_path / f"f{i}.parquet", bytes([i]))
    sensor = build_source_sensor(
        name="drops", url=str(tmp_path), target=[refreshed], max_files_per_tick=2
    )
    pages = []
    cursor = None
    for _ in range(4):
        result = tick(sensor, cursor)
        pages.append(requested(result))
        cursor = result.cursor
    assert pages == [["f0.parquet", "f1.parquet"], ["f2.parquet", "f3.parquet"], ["f4.parquet"], []]
    assert json.loads(cursor)["mark"] == os.path.getmtime(tmp_path / "f4.parquet")

    # Mid-way, an earlier file changes: its new modification time puts it after the rest.
    first = tick(sensor, None)
    write(tmp_path / "f0.parquet", b"changed")
    second = tick(sensor, first.cursor)
    assert requested(second) == ["f2.parquet", "f3.parquet"]
    assert json.loads(second.cursor)["mark"] == os.path.getmtime(tmp_path / "f3.parquet")
    assert requested(tick(sensor, second.cursor)) == ["f4.parquet", "f0.parquet"]


def test_dynamic_partitions_per_file(tmp_path: Path) -> None:
    sensor = build_source_sensor(
        name="per_file_sensor",
        url=str(tmp_path),
        target=[per_file],
        partitions_def=DROPS,
        run_config_fn=lambda f: {"ops": {}} if f.size > 1 else {},
        tags={"team": "robotics"},
    )
    write(tmp_path / "a.parquet", b"a")
    write(tmp_path / "b.parquet", b"bb")
    with dg.instance_for_test() as instance:
        result = tick(sensor, None, instance)
        (add,) = result.dynamic_partitions_requests
        assert isinstance(add, dg.AddDynamicPartitionsRequest)
        assert add.partitions_def_name == "test_source_files"
        assert list(add.partition_keys) == ["a.parquet", "b.parquet"]
        assert [r.partition_key for r in result.run_requests] == ["a.parquet", "b.parquet"]
        assert all(r.tags["team"] == "robotics" for r in result.run_requests)
        # run_config_fn sees each file: only the larger one gets a config
        assert [r.run_config for r in result.run_requests] == [{}, {"ops": {}}]

        # Apply the request as the daemon would, then run one requested partition.
        instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
        run = dg.materialize([per_file], partition_key="b.parquet", instance=instance)
        assert run.success

        # A name Dagster cannot use as a partition key is skipped once, not failed on.
        write(tmp_path / "c...parquet", b"c")
        odd = tick(sensor, result.cursor, instance)
        assert requested(odd) == [] and not odd.dynamic_partitions_requests
        assert "c...parquet" in json.loads(odd.cursor)["recent"]

        # A changed file re-requests its partition but does not add it again.
        write(tmp_path / "a.parquet", b"a, edited")
        again = tick(sensor, odd.cursor, instance)
        assert [r.partition_key for r in again.run_requests] == ["a.parquet"]
        assert not again.dynamic_partitions_requests


def test_sensor_loads_in_definitions(tmp_path: Path) -> None:
    sensor = build_source_sensor(name="drops", url=str(tmp_path), target=[refreshed])
    defs = dg.Definitions(assets=[refreshed], sensors=[sensor])
    loaded = defs.resolve_sensor_def("drops")
    assert loaded.default_status == dg.DefaultSensorStatus.STOPPED
    assert loaded.minimum_interval_seconds == 30


def test_bad_arguments_and_cursor(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_files_per_tick"):
        build_source_sensor(name="s", url=str(tmp_path), target=[refreshed], max_files_per_tick=0)
    with pytest.raises(ValueError, match="exactly one of target= or job="):
        build_source_sensor(name="s", url=str(tmp_path))
    with pytest.raises(ValueError, match="DynamicPartitionsDefinition"):
        build_source_sensor(
            name="s",
            url=str(tmp_path),
            target=[refreshed],
            partitions_def=dg.StaticPartitionsDefinition(["a"]),  # type: ignore[arg-type]
        )
    with pytest.raises(ValueError, match="reset"):
        SourceCursor.parse("not json")
    with pytest.raises(ValueError, match="reset"):
        SourceCursor.parse('{"v": 99}')
    # A folder that does not exist yet is simply empty.
    assert list_source_files(str(tmp_path / "missing")) == []


def test_s3_prefix(s3_bucket: str, s3_storage_options: dict) -> None:
    fs = s3fs.S3FileSystem(**s3_storage_options)
    fs.pipe(f"{s3_bucket}/drops/a.parquet", b"first")
    fs.pipe(f"{s3_bucket}/drops/nested/b.parquet", b"second")
    fs.pipe(f"{s3_bucket}/other/c.parquet", b"not watched")
    sensor = build_source_sensor(
        name="s3_drops",
        url=f"s3://{s3_bucket}/drops",
        target=[refreshed],
        storage_options=s3_storage_options,
        max_files_per_tick=1,
    )
    with dg.instance_for_test() as instance:
        first = tick(sensor, None, instance)
        assert requested(first) == ["a.parquet"]
        (request,) = first.run_requests
        etag = fs.info(f"{s3_bucket}/drops/a.parquet")["ETag"].strip('"')
        assert request.run_key == f"a.parquet@etag-{etag}"
        assert request.tags[SOURCE_URL_TAG] == f"s3://{s3_bucket}/drops/a.parquet"

        second = tick(sensor, first.cursor, instance)
        assert requested(second) == ["nested/b.parquet"]
        assert requested(tick(sensor, second.cursor, instance)) == []

        # Overwriting the object changes its ETag: exactly one new run.
        fs.pipe(f"{s3_bucket}/drops/a.parquet", b"first, fixed")
        third = tick(sensor, second.cursor, instance)
        assert requested(third) == ["a.parquet"]
        assert third.run_requests[0].run_key != request.run_key
        assert requested(tick(sensor, third.cursor, instance)) == []


def test_s3_resource_as_sensor_resource(s3_server, s3_bucket: str, s3_storage_options) -> None:
    from .test_io_manager import moto_s3_resource

    fs = s3fs.S3FileSystem(**s3_storage_options)
    fs.pipe(f"{s3_bucket}/drops/a.parquet", b"first")
    sensor = build_source_sensor(
        name="s3_resource_drops",
        url=f"s3://{s3_bucket}/drops",
        target=[refreshed],
        s3_resource_key="s3",
    )
    assert sensor.required_resource_keys == {"s3"}
    defs = dg.Definitions(
        assets=[refreshed], sensors=[sensor], resources={"s3": moto_s3_resource(s3_server)}
    )
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(
            instance=instance, definitions=defs, resources={"s3": moto_s3_resource(s3_server)}
        )
        result = defs.resolve_sensor_def("s3_resource_drops")(context)
        assert requested(result) == ["a.parquet"]
        assert result.run_requests[0].tags[SOURCE_URL_TAG] == f"s3://{s3_bucket}/drops/a.parquet"


def test_cursor_stays_small_at_100000_files(tmp_path: Path) -> None:
    start = 1_700_000_000
    for i in range(100_000):
        path = tmp_path / f"d{i // 1000:03d}" / f"f{i:06d}.parquet"
        if i % 1000 == 0:
            path.parent.mkdir()
        path.write_bytes(b"x")
        os.utime(path, (start + i, start + i))  # one file a second, over a day and more
    sensor = build_source_sensor(
        name="big_drops",
        url=str(tmp_path),
        target=[refreshed],
        max_files_per_tick=100_000,
        lookback_seconds=600,
    )
    first = tick(sensor, None)
    assert len(first.run_requests) == 100_000
    assert len(first.cursor.encode()) < 100_000
    saved = json.loads(first.cursor)
    assert saved["mark"] == start + 99_999 and len(saved["recent"]) <= 601
    # nothing is requested again, and the cursor does not grow
    second = tick(sensor, first.cursor)
    assert requested(second) == [] and len(second.cursor) <= len(first.cursor)
    # a new file, and an old one changed, are both found
    write(tmp_path / "new.parquet", b"n", mtime=start + 100_000)
    write(tmp_path / "d000" / "f000000.parquet", b"changed", mtime=start + 100_001)
    third = tick(sensor, second.cursor)
    assert requested(third) == ["new.parquet", "d000/f000000.parquet"]


def test_partition_key_maps_back_to_its_source_url(tmp_path: Path) -> None:
    from refiner_dagster import partition_source_url

    seen: dict = {}

    @dg.asset(partitions_def=DROPS)
    def per_file_source(context: dg.AssetExecutionContext) -> None:
        seen["url"] = partition_source_url(str(tmp_path), context.partition_key)

    write(tmp_path / "sub" / "a.parquet", b"a")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(DROPS.name, ["sub/a.parquet"])
        # as from the UI: a run of the partition with none of the sensor's tags
        result = dg.materialize([per_file_source], partition_key="sub/a.parquet", instance=instance)
        assert result.success
    assert seen["url"] == str(tmp_path / "sub" / "a.parquet") and os.path.exists(seen["url"])
    assert partition_source_url("s3://b/drops/", "x/y.jsonl") == "s3://b/drops/x/y.jsonl"
    with pytest.raises(ValueError, match="not a relative path"):
        partition_source_url("s3://b/drops", "../secrets")
