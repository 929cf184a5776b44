"""Planning read_parquet over many files: footers are read concurrently, and the plan is
the one a serial planner makes (same shards, same order), locally and on S3."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs

import refiner_core as mdr
import refiner_core.sources.parquet as parquet_source
from tests.s3_fixtures import *  # noqa: F403
from tests.s3_server import max_in_flight


def small_table(i: int) -> pa.Table:
    rows = 1 + i % 7  # files of different sizes, so shards hold different counts
    return pa.table({"i": list(range(i, i + rows)), "name": [f"n{i}-{r}" for r in range(rows)]})


def plans(url: str, monkeypatch, **options) -> tuple[list, list]:
    """The plan with the default footer threads, then with one (serial)."""
    parallel = mdr.read_parquet(url, target_shard_bytes=4_000, **options).plan()
    monkeypatch.setattr(parquet_source, "FOOTER_READ_THREADS", 1)
    serial = mdr.read_parquet(url, target_shard_bytes=4_000, **options).plan()
    return [s.payload for s in parallel], [s.payload for s in serial]


def test_local_plan_matches_the_serial_plan(tmp_path: Path, monkeypatch) -> None:
    for i in range(300):
        folder = tmp_path / f"part{i % 4}"
        folder.mkdir(exist_ok=True)
        pq.write_table(small_table(i), folder / f"f{i:04d}.parquet")
    parallel, serial = plans(str(tmp_path), monkeypatch)
    assert parallel == serial
    assert 1 < len(parallel) < 300  # small files grouped, several per shard
    assert sum(len(p) for p in parallel) == 300
    assert parallel[0][0].url.endswith("part0/f0000.parquet")


@pytest.fixture
def parquet_prefix(s3_server, s3_bucket: str) -> str:
    fs = s3fs.S3FileSystem(**s3_server.storage_options(), skip_instance_cache=True)
    blobs = {}
    for i in range(200):
        sink = pa.BufferOutputStream()
        pq.write_table(small_table(i), sink)
        blobs[f"{s3_bucket}/many/part{i % 3}/f{i:04d}.parquet"] = sink.getvalue().to_pybytes()
    fs.pipe(blobs)
    return f"s3://{s3_bucket}/many"


def test_s3_footers_are_read_concurrently(s3_proxy, parquet_prefix: str, monkeypatch) -> None:
    s3_proxy.latency_s = 0.02  # each request takes a while, as on a real store
    options = {"storage_options": s3_proxy.storage_options()}
    parallel, serial = plans(parquet_prefix, monkeypatch, **options)
    assert parallel == serial
    assert sum(len(p) for p in parallel) == 200
    # Two plans' worth of GETs: the first plan's overlap, the serial one's never do.
    gets = s3_proxy.records("GetObject")
    half = len(gets) // 2
    assert max_in_flight(gets[:half], "GetObject") >= 8
    assert max_in_flight(gets[half:], "GetObject") == 1
