"""The source sensor with names_ordered=True: ticks list only what is new, the cursor
stays a few keys long, and a periodic full scan catches files that land under low names."""

import json
import os
import time
from pathlib import Path

import dagster as dg
import pytest
import s3fs

import refiner_dagster.ordered_listing as ordered_listing
from refiner_dagster.ordered_cursor import MAX_PASSES
from refiner_dagster.ordered_listing import ListingStats, iter_files_after
from refiner_dagster.sensors import SOURCE_PATH_TAG, SourceCursor, build_source_sensor

OLD = 1_700_000_000.0


@dg.asset
def refreshed() -> None:
    """Stands in for the dataset a new source file refreshes."""


def tick(sensor: dg.SensorDefinition, cursor: str | None) -> dg.SensorResult:
    result = sensor(dg.build_sensor_context(cursor=cursor))
    assert isinstance(result, dg.SensorResult) and result.cursor is not None
    return result


def requested(result: dg.SensorResult) -> list[str]:
    return [r.tags[SOURCE_PATH_TAG] for r in result.run_requests or []]


def write(path: Path, data: bytes = b"x", mtime: float | None = OLD) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def ordered(url: str, **kwargs) -> dg.SensorDefinition:
    return build_source_sensor(
        name="ordered_drops", url=url, target=[refreshed], names_ordered=True, **kwargs
    )


class CountingScandir:
    """Counts the folder entries the local walk reads."""

    def __init__(self) -> None:
        self.entries = 0
        self._scandir = os.scandir

    def __call__(self, path):
        counter = self

        class _Scan:
            def __enter__(self):
                self._it = counter._scandir(path)
                return self

            def __iter__(self):
                for entry in self._it:
                    counter.entries += 1
                    yield entry

            def __exit__(self, *exc):
                self._it.close()

        return _Scan()


def test_local_tick_reads_only_new_folders(tmp_path: Path, monkeypatch) -> None:
    for i in range(10_000):
        write(tmp_path / f"day{i // 100:03d}" / f"f{i:05d}.parquet")
    sensor = ordered(str(tmp_path), max_files_per_tick=20_000)
    first = tick(sensor, None)
    assert len(first.run_requests) == 10_000
    for i in range(10_000, 10_100):
        write(tmp_path / f"day{i // 100:03d}" / f"f{i:05d}.parquet", mtime=None)

    counting = CountingScandir()
    monkeypatch.setattr(ordered_listing.os, "scandir", counting)
    second = tick(sensor, first.cursor)
    assert requested(second) == [f"day100/f{i:05d}.parquet" for i in range(10_000, 10_100)]
    # the root's 101 folders, the folder of the last key and the new one; no other
    assert counting.entries == 101 + 100 + 100
    counting.entries = 0
    assert requested(tick(sensor, second.cursor)) == []
    assert counting.entries == 101 + 100


def seed_moto(bucket: str, keys: list[str]) -> None:
    """Put many one-byte objects into the in-process moto server's store: 10,000 PUTs
    over HTTP take about 100 s on moto; the sensor still lists them over HTTP."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    for key in keys:
        backend.put_object(bucket, key, b"x")


def test_s3_tick_reads_one_list_page(s3_proxy, s3_bucket: str) -> None:
    options = s3_proxy.storage_options()
    fs = s3fs.S3FileSystem(**options)
    seed_moto(s3_bucket, [f"drops/f{i:05d}.parquet" for i in range(10_000)])
    sensor = ordered(f"s3://{s3_bucket}/drops", storage_options=options, max_files_per_tick=20_000)
    first = tick(sensor, None)
    assert len(first.run_requests) == 10_000
    fs.pipe({f"{s3_bucket}/drops/f{i:05d}.parquet": b"x" for i in range(10_000, 10_100)})

    s3_proxy.clear()
    second = tick(sensor, first.cursor)
    assert requested(second) == [f"f{i:05d}.parquet" for i in range(10_000, 10_100)]
    lists = s3_proxy.records("ListObjects")
    assert len(lists) == 1  # a full listing reads 11 pages of 1,000 keys
    assert lists[0].query["start-after"] == "drops/f09999.parquet"
    etag = fs.info(f"{s3_bucket}/drops/f10000.parquet")["ETag"].strip('"')
    assert second.run_requests[0].run_key == f"f10000.parquet@etag-{etag}"
    fs.rm(f"{s3_bucket}/drops", recursive=True)  # in batches; the fixture deletes one by one


def test_cursor_is_bounded_whatever_the_folder_holds(tmp_path: Path) -> None:
    sensor = ordered(str(tmp_path), full_scan_every=1_000)
    cursor = None
    sizes = []
    for i in range(200):
        write(tmp_path / f"f{i:05d}.parquet")
        result = tick(sensor, cursor)
        assert requested(result) == [f"f{i:05d}.parquet"]
        cursor = result.cursor
        sizes.append(len(cursor))
    passes = json.loads(cursor)["passes"]
    assert len(passes) == MAX_PASSES
    assert max(sizes) < 48 * MAX_PASSES + 100  # each pass is one short key and a time


def test_late_low_name_is_caught_by_the_full_scan(tmp_path: Path) -> None:
    for name in ("b1.parquet", "b2.parquet", "b3.parquet"):
        write(tmp_path / name)
    sensor = ordered(str(tmp_path), full_scan_every=3)
    first = tick(sensor, None)  # the first tick is a full scan
    assert requested(first) == ["b1.parquet", "b2.parquet", "b3.parquet"]

    write(tmp_path / "a-late.parquet", mtime=time.time())  # lands below the last name
    write(tmp_path / "b2.parquet", b"edited", mtime=time.time())  # overwritten in place
    write(tmp_path / "c.parquet", mtime=time.time())
    second = tick(sensor, first.cursor)
    assert requested(second) == ["c.parquet"]
    third = tick(sensor, second.cursor)
    assert requested(third) == []
    full = tick(sensor, third.cursor)  # every third tick lists everything
    assert requested(full) == ["a-late.parquet", "b2.parquet", "c.parquet"]
    # c.parquet comes again with the same run key, which Dagster skips
    assert full.run_requests[2].run_key == second.run_requests[0].run_key
    assert requested(tick(sensor, full.cursor)) == []


def test_pagination_and_full_scan_across_ticks(tmp_path: Path) -> None:
    for i in range(5):
        write(tmp_path / f"f{i}.parquet", bytes([i]))
    sensor = ordered(str(tmp_path), max_files_per_tick=2, full_scan_every=2)
    pages, cursor = [], None
    for _ in range(4):
        result = tick(sensor, cursor)
        pages.append(requested(result))
        cursor = result.cursor
    assert pages == [["f0.parquet", "f1.parquet"], ["f2.parquet", "f3.parquet"], ["f4.parquet"], []]
    assert json.loads(cursor)["ticks"] == 1
    write(tmp_path / "f5.parquet")
    assert requested(tick(sensor, cursor)) == ["f5.parquet"]  # found by the full scan


def test_date_partitions_on_s3_list_from_the_last_key(s3_proxy, s3_bucket: str) -> None:
    options = s3_proxy.storage_options()
    fs = s3fs.S3FileSystem(**options)
    fs.pipe({f"{s3_bucket}/d/2024/01/{d:02d}/x.parquet": b"x" for d in range(1, 29)})
    fs.pipe(f"{s3_bucket}/d/2024/01/_tmp/y.parquet", b"hidden")
    stats = ListingStats()
    found = list(
        iter_files_after(
            f"s3://{s3_bucket}/d", "2024/01/27/x.parquet", storage_options=options, stats=stats
        )
    )
    assert [path for path, _ in found] == ["2024/01/28/x.parquet"]
    assert stats.pages == 1 and found[0][1]["size"] == 1


def test_cursors_carry_over_between_modes(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet")
    write(tmp_path / "b.parquet", mtime=OLD + 1000)
    legacy = build_source_sensor(name="legacy", url=str(tmp_path), target=[refreshed])
    old = tick(legacy, None)
    assert json.loads(old.cursor)["v"] == 2
    # A modification-time cursor: the first ordered tick is a full scan that requests
    # again only files within the lookback of its watermark, with the same run keys.
    carried = tick(ordered(str(tmp_path), lookback_seconds=5), old.cursor)
    assert [r.run_key for r in carried.run_requests] == [old.run_requests[1].run_key]
    assert json.loads(carried.cursor)["v"] == 3
    write(tmp_path / "c.parquet", mtime=OLD + 20)
    assert requested(tick(ordered(str(tmp_path)), carried.cursor)) == ["c.parquet"]
    # And back: the ordered cursor reads as a watermark.
    assert SourceCursor.parse(carried.cursor).mark is not None
    assert requested(tick(legacy, carried.cursor)) == []


def test_full_scan_every_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="full_scan_every"):
        ordered(str(tmp_path), full_scan_every=0)
