"""Finalization of a few hundred shards on moto S3: each manifest read once, concurrently,
and one listing of the manifest folder, counted at the server through a proxy."""

from __future__ import annotations

import math

import pytest

import refiner_core as mdr
from tests.s3_fixtures import *  # noqa: F403
from tests.s3_server import max_in_flight

SHARDS = 300
MANIFESTS = "_refiner/attempts"


@pytest.mark.timeout(600)
def test_finalization_reads_each_manifest_once_in_parallel(s3_bucket, s3_proxy):
    url = f"s3://{s3_bucket}/out"
    options = s3_proxy.storage_options()
    sequence = mdr.from_items([{"i": i} for i in range(SHARDS)], items_per_shard=1).write_jsonl(
        url, storage_options=options
    )
    stats = sequence.launch_local(num_workers=2)
    s3_proxy.clear()

    summary = sequence.finalize(stats.run_id)  # idempotent: the same reduction again
    assert summary.shards == SHARDS and summary.rows_written == SHARDS

    records = s3_proxy.records()
    manifest_gets = [r for r in records if r.kind == "GetObject" and f"/{MANIFESTS}/" in r.path]
    assert len(manifest_gets) == SHARDS and len({r.path for r in manifest_gets}) == SHARDS
    manifest_lists = [
        r for r in records if r.kind == "ListObjects" and MANIFESTS in r.query.get("prefix", "")
    ]
    assert len(manifest_lists) <= math.ceil(SHARDS / 1000)
    assert max_in_flight(records, "GetObject") > 1  # read concurrently
    gets = sum(r.kind == "GetObject" for r in records)
    lists = sum(r.kind == "ListObjects" for r in records)
    puts = sum(r.kind == "PutObject" for r in records)
    # Besides the manifests, a constant number: the owner record (GET), the summary's
    # ETag (HEAD), the summary twice, the owner record and the clock probe (PUT); the
    # data folder (a page per thousand files), the open uploads, and the owner records
    # at taking the folder, at each ownership check before a destructive step and after the
    # release record is written (LIST).
    print(f"finalize of {SHARDS} shards: {gets} GET, {lists} LIST, {puts} PUT")
    assert gets <= SHARDS + 10
    assert lists <= 2 * math.ceil(SHARDS / 1000) + 14
    assert puts <= 10
