"""The source sensor drives partitioned datasets: ``partition_fn`` maps files to keys.

A real instance evaluates the sensor; its run requests are then run as the daemon
would (partition key and tags of the request) on a daily- and a dynamically
partitioned fan-out dataset, and each requested partition is published.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.sensors import (
    SOURCE_FILES_TAG,
    SOURCE_PATH_TAG,
    SourceFile,
    build_source_sensor,
)

DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01")
ROBOTS = dg.DynamicPartitionsDefinition(name="sensor_robots")


def first_folder(source: SourceFile) -> str | None:
    folder, sep, _ = source.path.partition("/")
    return folder if sep else None  # files at the top level belong to no partition


def write_jsonl(path: Path, rows: list[dict], mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(path, (mtime, mtime))


def dataset(name: str, partitions: dg.PartitionsDefinition, drops: Path) -> dg.AssetsDefinition:
    def rows_of_partition(context) -> mdr.Pipeline:
        folder = drops / context.partition_key
        return mdr.read_jsonl(sorted(str(p) for p in folder.glob("*.jsonl")))

    return rd.build_dataset_asset(rows_of_partition, name=name, partitions_def=partitions)


def run_requests(sensor, instance, cursor=None) -> dg.SensorResult:
    result = sensor(dg.build_sensor_context(instance=instance, cursor=cursor))
    assert isinstance(result, dg.SensorResult)
    return result


def published_values(base: Path, name: str, key: str) -> list[int]:
    version = rd.RefinerBlobIOManager(base_url=str(base)).storage().current([name], key)
    assert version is not None, f"{name} {key} not published"
    return sorted(r.v for r in mdr.read_parquet(version.url).iter_rows())


def test_files_drive_a_daily_partitioned_dataset(dagster_instance, tmp_path, capfd):
    drops = tmp_path / "drops"
    write_jsonl(drops / "2024-01-02" / "a.jsonl", [{"v": 1}, {"v": 2}], 1_700_000_000)
    write_jsonl(drops / "2024-01-02" / "b.jsonl", [{"v": 3}], 1_700_000_010)
    write_jsonl(drops / "2024-01-03" / "a.jsonl", [{"v": 4}], 1_700_000_020)
    write_jsonl(drops / "notes" / "todo.jsonl", [{"v": 0}], 1_700_000_030)  # not a day
    write_jsonl(drops / "2023-12-31" / "a.jsonl", [{"v": 0}], 1_700_000_040)  # before start
    write_jsonl(drops / "readme.jsonl", [{"v": 0}], 1_700_000_050)  # no partition
    days = dataset("days", DAILY, drops)
    sensor = build_source_sensor(
        name="days_sensor",
        url=str(drops),
        target=[days],
        partitions_def=DAILY,
        partition_fn=first_folder,
    )
    result = run_requests(sensor, dagster_instance)
    requests = {r.partition_key: r for r in result.run_requests}
    assert sorted(requests) == ["2024-01-02", "2024-01-03"]
    assert not result.dynamic_partitions_requests
    # the two files of 2024-01-02 found in one tick make one run of that day
    assert requests["2024-01-02"].tags[SOURCE_FILES_TAG] == "2"
    assert requests["2024-01-02"].tags[SOURCE_PATH_TAG] == "2024-01-02/b.jsonl"
    assert requests["2024-01-03"].tags[SOURCE_FILES_TAG] == "1"
    warnings = [line for line in capfd.readouterr().err.splitlines() if "WARNING" in line]
    assert any("'notes', which is not a partition" in w and "todo.jsonl" in w for w in warnings)
    assert any("'2023-12-31', which is not a partition" in w for w in warnings)

    base = tmp_path / "out"
    resources = {"refiner": rd.RefinerBlobIOManager(base_url=str(base))}
    for request in requests.values():
        assert dg.materialize(
            [days],
            instance=dagster_instance,
            resources=resources,
            partition_key=request.partition_key,
            tags=request.tags,
        ).success
    assert published_values(base, "days", "2024-01-02") == [1, 2, 3]
    assert published_values(base, "days", "2024-01-03") == [4]

    # nothing new: no run; a changed file re-requests its day only
    again = run_requests(sensor, dagster_instance, result.cursor)
    assert again.run_requests == []
    write_jsonl(drops / "2024-01-03" / "a.jsonl", [{"v": 5}], 1_700_000_060)
    changed = run_requests(sensor, dagster_instance, again.cursor)
    assert [r.partition_key for r in changed.run_requests] == ["2024-01-03"]


def test_new_keys_are_added_to_dynamic_partitions(dagster_instance, tmp_path):
    drops = tmp_path / "drops"
    write_jsonl(drops / "r2d2" / "1.jsonl", [{"v": 7}], 1_700_000_000)
    write_jsonl(drops / "c3po" / "1.jsonl", [{"v": 8}], 1_700_000_010)
    robots = dataset("robots", ROBOTS, drops)
    sensor = build_source_sensor(
        name="robots_sensor",
        url=str(drops),
        target=[robots],
        partitions_def=ROBOTS,
        partition_fn=first_folder,
    )
    result = run_requests(sensor, dagster_instance)
    (add,) = result.dynamic_partitions_requests
    assert add.partitions_def_name == "sensor_robots"
    assert sorted(add.partition_keys) == ["c3po", "r2d2"]
    # apply the request as the daemon does, then run what the sensor asked for
    dagster_instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
    base = tmp_path / "out"
    for request in result.run_requests:
        assert dg.materialize(
            [robots],
            instance=dagster_instance,
            resources={"refiner": rd.RefinerBlobIOManager(base_url=str(base))},
            partition_key=request.partition_key,
            tags=request.tags,
        ).success
    assert published_values(base, "robots", "r2d2") == [7]
    assert published_values(base, "robots", "c3po") == [8]


def test_partitions_need_a_partition_fn_unless_dynamic(tmp_path):
    with pytest.raises(ValueError, match="pass partition_fn="):
        build_source_sensor(name="s", url=str(tmp_path), target=[], partitions_def=DAILY)
