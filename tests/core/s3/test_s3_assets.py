"""Asset writers and read_blob against a real S3 endpoint (moto server over HTTP)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import refiner_core as mdr
from tests.s3_fixtures import *  # noqa: F403
from tests.s3_server import max_in_flight


def _media(tmp_path, n: int, size: int = 3000) -> list[tuple[str, bytes]]:
    files = []
    for i in range(n):
        data = bytes((i + k) % 251 for k in range(size + i))
        path = tmp_path / f"clip_{i:03d}.mp4"
        path.write_bytes(data)
        files.append((str(path), data))
    return files


def _upload(
    s3_server, bucket: str, files: list[tuple[str, bytes]], prefix: str = "src"
) -> list[str]:
    client = s3_server.client()
    urls = []
    for path, data in files:
        key = f"{prefix}/{os.path.basename(path)}"
        client.put_object(Bucket=bucket, Key=key, Body=data)
        urls.append(f"s3://{bucket}/{key}")
    return urls


def test_blob_packing_to_s3_round_trip(tmp_path, s3_server, s3_bucket, s3_storage_options):
    files = _media(tmp_path, 12)
    out = f"s3://{s3_bucket}/packed"
    pipeline = mdr.from_items(
        [{"episode": i, "video": p} for i, (p, _) in enumerate(files)],
        items_per_shard=5,
        dtypes={"video": mdr.datatype.video_path()},
    )
    stats = pipeline.write_parquet(
        out, assets=mdr.BlobAssetConfig(target_bytes=10_000), storage_options=s3_storage_options
    ).launch_local(num_workers=2)
    summary = stats.summary
    assert summary.counters["rows_written"] == 12
    assert summary.counters["assets_written"] == 12
    assert summary.counters["blocks_written"] == 5
    rows = sorted(
        mdr.read_parquet(out, storage_options=s3_storage_options).materialize(),
        key=lambda r: r.episode,
    )
    assert len(rows) == 12
    for row, (_, data) in zip(rows, files, strict=True):
        ref = row["video"]
        assert ref["path"].startswith(f"s3://{s3_bucket}/packed/assets/")
        assert mdr.read_blob(ref, storage_options=s3_storage_options) == data
    keys = s3_server.keys(s3_bucket)
    assert any(k.endswith("_refiner/summary.json") for k in keys)
    assert sum(k.endswith(".parquet") for k in keys) == 3
    assert s3_server.open_uploads(s3_bucket) == []


def test_file_mode_copies_s3_to_s3_server_side_and_concurrently(
    tmp_path, s3_server, s3_bucket, s3_proxy
):
    files = _media(tmp_path, 24)
    urls = _upload(s3_server, s3_bucket, files)
    options = s3_proxy.storage_options()
    pipeline = mdr.from_items(
        [{"i": i, "clip": u} for i, u in enumerate(urls)], dtypes={"clip": mdr.datatype.file_path()}
    ).with_max_block_rows(4)
    s3_proxy.clear()
    stats = pipeline.write_parquet(
        f"s3://{s3_bucket}/out",
        assets=mdr.FileAssetConfig(max_in_flight=6),
        storage_options=options,
    ).launch_local()
    assert stats.summary.counters["assets_written"] == 24
    copies = s3_proxy.records("CopyObject")
    assert len(copies) == 24
    assert not [r for r in s3_proxy.records("PutObject") if "/out/assets/" in r.path]
    assert 2 <= max_in_flight(s3_proxy.records(), "CopyObject") <= 6
    rows = mdr.read_parquet(f"s3://{s3_bucket}/out", storage_options=options).materialize()
    fs = s3_server.client()
    for row in rows:
        key = row.clip.split(f"s3://{s3_bucket}/", 1)[1]
        assert key.startswith("out/assets/")
        assert fs.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == files[row.i][1]


def test_file_mode_uploads_local_files_with_bounded_concurrency(
    tmp_path, s3_server, s3_bucket, s3_proxy
):
    files = _media(tmp_path, 20)
    pipeline = mdr.from_items(
        [{"i": i, "clip": p} for i, (p, _) in enumerate(files)],
        dtypes={"clip": mdr.datatype.video_path()},
    )
    s3_proxy.latency_s = 0.02
    s3_proxy.clear()
    pipeline.write_parquet(
        f"s3://{s3_bucket}/out",
        assets=mdr.FileAssetConfig(max_in_flight=5),
        storage_options=s3_proxy.storage_options(),
    ).launch_local()
    puts = [r for r in s3_proxy.records("PutObject") if "/out/assets/" in r.path]
    assert len(puts) == 20
    peak = max_in_flight([r for r in s3_proxy.records() if "/out/assets/" in r.path], "PutObject")
    assert 2 <= peak <= 5


def test_read_blob_on_s3_is_one_ranged_get(s3_server, s3_bucket, s3_proxy):
    s3_server.client().put_object(Bucket=s3_bucket, Key="blob.bin", Body=b"0123456789" * 100)
    s3_proxy.clear()
    ref = {"path": f"s3://{s3_bucket}/blob.bin", "offset": 995, "size": 4}
    assert mdr.read_blob(ref, storage_options=s3_proxy.storage_options()) == b"5678"
    gets = s3_proxy.records("GetObject")
    assert len(gets) == 1
    assert not s3_proxy.records("HeadObject")
    with pytest.raises(EOFError, match="1000 bytes"):
        mdr.read_blob({**ref, "offset": 998}, storage_options=s3_proxy.storage_options())


@pytest.mark.parametrize("config", [mdr.FileAssetConfig, mdr.BlobAssetConfig])
def test_missing_s3_object_is_a_missing_asset(
    tmp_path, s3_server, s3_bucket, s3_storage_options, config
):
    files = _media(tmp_path, 3)
    urls = _upload(s3_server, s3_bucket, files)
    urls[1] = f"s3://{s3_bucket}/src/not-there.mp4"
    pipeline = mdr.from_items(
        [{"i": i, "clip": u} for i, u in enumerate(urls)],
        dtypes={"clip": mdr.datatype.video_path()},
    )
    out = f"s3://{s3_bucket}/null"
    stats = pipeline.write_parquet(
        out, assets=config(missing_policy="set_null"), storage_options=s3_storage_options
    ).launch_local()
    assert (stats.summary.counters["missing_assets"], stats.summary.counters["cells_nulled"]) == (
        1,
        1,
    )
    rows = sorted(
        mdr.read_parquet(out, storage_options=s3_storage_options).materialize(), key=lambda r: r.i
    )
    assert rows[1].clip is None and rows[0].clip is not None

    stats = pipeline.write_parquet(
        f"s3://{s3_bucket}/drop",
        assets=config(missing_policy="drop_row"),
        storage_options=s3_storage_options,
    ).launch_local()
    assert (stats.summary.counters["rows_dropped"], stats.summary.counters["rows_written"]) == (
        1,
        2,
    )

    with pytest.raises(mdr.StageFailed, match="not-there.mp4") as failure:
        pipeline.write_parquet(
            f"s3://{s3_bucket}/err", assets=config(), storage_options=s3_storage_options
        ).launch_local()
    assert "column 'clip', row 1" in str(failure.value)
    assert not [
        k
        for k in s3_server.keys(s3_bucket)
        if k.startswith("err/") and not k.startswith("err/_refiner/")
    ]
    assert s3_server.open_uploads(s3_bucket) == []


def test_coalesced_repack_on_s3_copies_whole_blocks_server_side_and_concurrently(
    tmp_path, s3_server, s3_bucket, s3_proxy
):
    """Every source block is fully referenced and at least the target size, so the
    re-pack copies each one server-side (CopyObject), several at once."""
    files = _media(tmp_path, 12, size=12_000)  # each asset larger than the target
    options = s3_proxy.storage_options()
    config = mdr.BlobAssetConfig(target_bytes=10_000, max_in_flight=4)
    mdr.from_items(
        [{"i": i, "video": p} for i, (p, _) in enumerate(files)],
        dtypes={"video": mdr.datatype.video_path()},
    ).write_parquet(
        f"s3://{s3_bucket}/packed", assets=config, storage_options=options
    ).launch_local()
    s3_proxy.clear()
    summary = (
        mdr.read_parquet(f"s3://{s3_bucket}/packed", storage_options=options)
        .write_parquet(f"s3://{s3_bucket}/repacked", assets=config, storage_options=options)
        .launch_local()
        .summary
    )
    assert summary.counters["blobs_coalesced"] == 12
    assert summary.counters["ranges_copied"] == 0
    copies = [r for r in s3_proxy.records("CopyObject") if "/repacked/assets/" in r.path]
    assert len(copies) == 12
    assert 2 <= max_in_flight(copies, "CopyObject") <= 4
    rows = mdr.read_parquet(f"s3://{s3_bucket}/repacked", storage_options=options).materialize()
    assert sorted((r.i, mdr.read_blob(r.video, storage_options=options)) for r in rows) == [
        (i, data) for i, (_, data) in enumerate(files)
    ]


def test_large_blob_ranges_on_s3_are_streamed_without_reading_past_them(
    s3_server, s3_bucket, s3_proxy
):
    """References of more than 8 MiB into a larger object are streamed; each fetch stops
    at the reference's end (s3fs's read-ahead would add 50 MiB to every read)."""
    data = os.urandom(40 * 2**20)
    s3_server.client().put_object(Bucket=s3_bucket, Key="block.bin", Body=data)
    url = f"s3://{s3_bucket}/block.bin"
    spans = [(0, 9 * 2**20), (12 * 2**20, 9 * 2**20), (30 * 2**20, 9 * 2**20 + 5)]
    rows = [
        {"i": i, "clip": {"path": url, "offset": o, "size": s}} for i, (o, s) in enumerate(spans)
    ]
    options = s3_proxy.storage_options()
    out = f"s3://{s3_bucket}/out"
    s3_proxy.clear()
    summary = (
        mdr.from_items(rows, dtypes={"clip": mdr.datatype.blob_reference("video")})
        .write_parquet(out, assets=mdr.BlobAssetConfig(), storage_options=options)
        .launch_local()
        .summary
    )
    assert summary.counters["ranges_copied"] == 3
    reads = [r for r in s3_proxy.records("GetObject") if r.path.endswith("/block.bin")]
    fetched = sum(r.response_bytes for r in reads)
    wanted = sum(s for _, s in spans)
    assert fetched <= wanted + 2**20, f"{fetched} bytes fetched for {wanted} referenced"
    written = mdr.read_parquet(out, storage_options=options).materialize()
    assert sorted((r.i, mdr.read_blob(r.clip, storage_options=options)) for r in written) == [
        (i, data[o : o + s]) for i, (o, s) in enumerate(spans)
    ]


@pytest.mark.parametrize("config", [mdr.FileAssetConfig, mdr.BlobAssetConfig])
def test_assets_on_s3_are_read_with_source_storage_options_into_a_local_output(
    tmp_path, s3_server, s3_bucket, s3_storage_options, config
):
    """The output is local, so its storage options say nothing of S3: the sources are
    reached through ``source_storage_options`` (here: moto's endpoint)."""
    files = _media(tmp_path, 5)
    urls = _upload(s3_server, s3_bucket, files)
    assets = config(source_storage_options=s3_storage_options)
    out = tmp_path / "out"
    summary = (
        mdr.from_items(
            [{"i": i, "video": url} for i, url in enumerate(urls)],
            dtypes={"video": mdr.datatype.video_path()},
        )
        .write_parquet(str(out), assets=assets)
        .launch_local()
        .summary
    )
    assert summary.counters["assets_written"] == 5
    rows = sorted(mdr.read_parquet(str(out)).materialize(), key=lambda r: r.i)
    if config is mdr.FileAssetConfig:
        got = [Path(r.video).read_bytes() for r in rows]
    else:
        got = [mdr.read_blob(r.video) for r in rows]
    assert got == [data for _, data in files]
