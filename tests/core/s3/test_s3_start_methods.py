"""Workers started fresh (spawn, forkserver) read and write S3 with the storage options
the pipeline carries, media included."""

from __future__ import annotations

import io
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from tests.s3_fixtures import *  # noqa: F403

pytestmark = pytest.mark.usefixtures("fresh_forkserver")


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_s3_index_and_media_packed_to_s3_by_fresh_workers(
    s3_server, s3_bucket, s3_storage_options, start_method
):
    client = s3_server.client()
    payloads = [bytes([i]) * (500 + i) for i in range(10)]
    for i, data in enumerate(payloads):
        client.put_object(Bucket=s3_bucket, Key=f"media/clip-{i}.bin", Body=data)
    index = io.BytesIO()
    clips = [f"s3://{s3_bucket}/media/clip-{i}.bin" for i in range(10)]
    pq.write_table(pa.table({"i": list(range(10)), "clip": clips}), index)
    client.put_object(Bucket=s3_bucket, Key="index.parquet", Body=index.getvalue())

    out = f"s3://{s3_bucket}/packed-{start_method}"
    pipeline = mdr.read_parquet(
        f"s3://{s3_bucket}/index.parquet",
        dtypes={"clip": mdr.datatype.file_path()},
        storage_options=s3_storage_options,
    ).map(lambda row: {"pid": os.getpid()})
    stats = pipeline.write_parquet(
        out, assets=mdr.BlobAssetConfig(), storage_options=s3_storage_options
    ).launch_local(num_workers=2, start_method=start_method)
    assert stats.stages[0].shards == 8 and stats.summary.counters["assets_written"] == 10
    rows = mdr.read_parquet(out, storage_options=s3_storage_options).materialize()
    assert sorted(r.i for r in rows) == list(range(10))
    assert len({r.pid for r in rows}) == 2
    for row in rows:
        assert row.clip["path"].startswith(f"{out}/assets/")
        assert mdr.read_blob(row.clip, storage_options=s3_storage_options) == payloads[row.i]
