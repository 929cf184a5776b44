"""The S3 requests of one publish: small records are read with one GET each, and the
fixed chain of requests of an overwrite and of an append stays bounded (moto S3 behind
the recording proxy, a real Dagster instance). Deleting a version folder lists it once."""

from __future__ import annotations

import os
import re

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.version_gc import delete_version_files

# Records a publish reads whole: version records, the pointer, and the bookkeeping
# under each version's ``_refiner/`` (summary, inheritance, manifests, owner records).
_SMALL_RECORD = re.compile(r"/_versions/|/_current\.json$|/_refiner/")

# Requests of one materialization of a one-shard dataset (write, audit, publish, cleanup);
# 76 and 89 when written, where reading the pointer twice before the reduction and twice
# before the move, and finding the first summary absent by a HEAD and a listing, made 79
# and 92 (and reading each record with a HEAD first, 110 and 126).
MAX_OVERWRITE_REQUESTS = 78
MAX_APPEND_REQUESTS = 91
# Reads of the pointer: when the version begins, before its reduction, and under the
# publish hold right before the pointer moves.
POINTER_READS = 3


def _asset(batches: list[list[dict]], mode: str):
    @dg.asset(name="episodes", io_manager_key="refiner", metadata={"refiner/mode": mode})
    def episodes() -> mdr.Pipeline:
        items = batches.pop(0)
        return mdr.from_items(
            items, items_per_shard=len(items), dtypes={"image": mdr.datatype.image_path()}
        )

    return episodes


def _publish_twice(dagster_instance, media, s3_bucket, s3_proxy, mode: str):
    """Publish a packed dataset, then record the requests of publishing it again."""
    from tests.dagster.fanout_defs import S3_ENDPOINT_ENV, s3_resource

    os.environ[S3_ENDPOINT_ENV] = s3_proxy.endpoint_url
    try:
        refiner = rd.RefinerBlobIOManager(
            base_url=f"s3://{s3_bucket}/data", num_workers=1, s3=s3_resource()
        )
    finally:
        del os.environ[S3_ENDPOINT_ENV]
    files = media(44)
    rows = [{"i": i, "image": path} for i, (path, _) in enumerate(files)]
    episodes = _asset([rows[:40], rows[40:] if mode == "append" else rows], mode)
    assets = [episodes, rd.build_finalization_asset(episodes)]
    resources = {"refiner": refiner}
    assert dg.materialize(assets, instance=dagster_instance, resources=resources).success
    storage = refiner.storage()
    first = storage.current(["episodes"], None)
    s3_proxy.clear()
    assert dg.materialize(assets, instance=dagster_instance, resources=resources).success
    records = sorted(s3_proxy.records(), key=lambda r: r.start)
    assert storage.current(["episodes"], None).name != first.name
    return records


def _heads_before_reads(records) -> list[str]:
    """Small records asked for with a HEAD and then read: the GET alone would do."""
    return [
        r.path
        for r, after in zip(records, records[1:], strict=False)
        if r.kind == "HeadObject"
        and after.kind == "GetObject"
        and after.path == r.path
        and _SMALL_RECORD.search(r.path)
    ]


def _heads_of_records(records) -> list[str]:
    """HEADs of version records and of the pointer, which are only ever read whole."""
    return [
        r.path
        for r in records
        if r.kind == "HeadObject" and re.search(r"/_versions/|/_current\.json$", r.path)
    ]


@pytest.mark.parametrize(
    ("mode", "bound"), [("overwrite", MAX_OVERWRITE_REQUESTS), ("append", MAX_APPEND_REQUESTS)]
)
def test_a_publish_reads_small_records_with_one_get_each(
    dagster_instance, media, s3_bucket, s3_proxy, mode, bound
):
    records = _publish_twice(dagster_instance, media, s3_bucket, s3_proxy, mode)
    counts: dict[str, int] = {}
    for r in records:
        counts[r.kind] = counts.get(r.kind, 0) + 1
    assert _heads_before_reads(records) == []
    assert _heads_of_records(records) == []
    assert len(records) <= bound, counts


def _pointer_reads(records) -> int:
    return sum(1 for r in records if r.kind == "GetObject" and r.path.endswith("/_current.json"))


def _folder_listings_of_files(records) -> list[str]:
    """Listings of ``<file>/`` that s3fs sends to tell a missing file from a folder."""
    return [
        r.query["prefix"]
        for r in records
        if r.kind == "ListObjects" and r.query.get("prefix", "").endswith(".json/")
    ]


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_a_publish_reads_the_pointer_once_per_check_and_heads_the_summary_alone(
    dagster_instance, media, s3_bucket, s3_proxy, mode
):
    records = _publish_twice(dagster_instance, media, s3_bucket, s3_proxy, mode)
    assert _pointer_reads(records) == POINTER_READS
    assert _folder_listings_of_files(records) == []


def test_deleting_a_version_folder_lists_it_once(s3_bucket, s3_proxy):
    dataset = mdr.DataFolder(f"s3://{s3_bucket}/data", s3_proxy.storage_options())
    for name in ("v-1/part-0.parquet", "v-1/_refiner/summary.json", "v-1/assets/b.bin"):
        dataset.write_bytes(name, b"x")
    s3_proxy.clear()
    assert delete_version_files(dataset, "v-1", set()) == 3
    assert [r.kind for r in s3_proxy.records()] == ["ListObjects", "DeleteObjects"]
    assert dataset.find() == []
    s3_proxy.clear()
    assert delete_version_files(dataset, "v-2", set()) == 0
    assert [r.kind for r in s3_proxy.records()] == ["ListObjects"]
