"""BlobAssetConfig(dedupe=...): repeated media is stored once per attempt, on local disk and S3."""

from __future__ import annotations

import json
import os
from pathlib import Path

import google_crc32c
import pytest
import s3fs

import refiner_core as mdr
from tests.s3_fixtures import *  # noqa: F403

from .media import blocks, read_rows, write_files

dt = mdr.datatype
DISTINCT = 10
ROWS = 100


def _contents(count: int = DISTINCT) -> list[bytes]:
    return [os.urandom(700 + 37 * i) for i in range(count)]


class Store:
    """Where sources and output live for one test: a local folder or a moto S3 bucket."""

    def __init__(self, tmp_path: Path, options: dict | None = None, bucket: str | None = None):
        self.tmp_path, self.options, self.bucket = tmp_path, options, bucket

    def put(self, name: str, data: bytes) -> str:
        if self.bucket is None:
            return write_files(self.tmp_path / "src", {name: data})[name]
        url = f"s3://{self.bucket}/src/{name}"
        s3fs.S3FileSystem(**self.options).pipe_file(url, data)
        return url

    def output(self, name: str = "out") -> str:
        return str(self.tmp_path / name) if self.bucket is None else f"s3://{self.bucket}/{name}"

    def block_bytes(self, output: str) -> int:
        if self.bucket is None:
            return sum(b.stat().st_size for b in blocks(Path(output)))
        fs = s3fs.S3FileSystem(**self.options)
        return sum(fs.size(p) for p in fs.find(f"{output}/assets") if p.endswith(".bin"))

    def rows(self, output: str) -> list[dict]:
        rows = mdr.read_parquet(output, storage_options=self.options).materialize()
        return sorted((r.to_dict() for r in rows), key=lambda r: r["i"])

    def read(self, ref: dict) -> bytes:
        return mdr.read_blob(ref, storage_options=self.options)


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return Store(tmp_path)
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return Store(tmp_path, server.storage_options(), bucket)


def _write(store: Store, rows: list[dict], config: mdr.BlobAssetConfig, name: str = "out"):
    output = store.output(name)
    pipeline = mdr.from_items(rows, items_per_shard=len(rows), dtypes={"video": dt.video_path()})
    summary = (
        pipeline.write_parquet(output, assets=config, storage_options=store.options)
        .launch_local()
        .summary
    )
    return output, summary


def test_source_dedupe_stores_each_of_ten_files_once_for_a_hundred_rows(store):
    contents = _contents()
    urls = [store.put(f"clip_{i}.y4m", data) for i, data in enumerate(contents)]
    rows = [{"i": i, "video": urls[i % DISTINCT]} for i in range(ROWS)]
    output, summary = _write(store, rows, mdr.BlobAssetConfig(dedupe="source"))

    distinct_bytes = sum(map(len, contents))
    assert store.block_bytes(output) == distinct_bytes
    assert summary.counters["block_bytes"] == distinct_bytes
    assert summary.counters["asset_bytes"] == distinct_bytes
    assert summary.counters["assets_written"] == ROWS
    assert summary.counters["assets_deduplicated"] == ROWS - DISTINCT
    assert summary.counters["bytes_deduplicated"] == 9 * distinct_bytes
    written = store.rows(output)
    assert [store.read(r["video"]) for r in written] == [
        contents[i % DISTINCT] for i in range(ROWS)
    ]
    # repeats point at the very same stored range
    assert written[0]["video"] == written[DISTINCT]["video"] == written[90]["video"]
    manifests = _manifest_counters(store, output)
    assert sum(m["assets_deduplicated"] for m in manifests) == ROWS - DISTINCT


def test_content_dedupe_stores_ten_byte_strings_under_a_hundred_paths_once(store):
    contents = _contents()
    urls = [store.put(f"copy_{i:03d}.y4m", contents[i % DISTINCT]) for i in range(ROWS)]
    rows = [{"i": i, "video": urls[i]} for i in range(ROWS)]
    assert len(set(urls)) == ROWS

    source, source_summary = _write(store, rows, mdr.BlobAssetConfig(dedupe="source"), "by-source")
    assert source_summary.counters["assets_deduplicated"] == 0  # a hundred different sources
    output, summary = _write(store, rows, mdr.BlobAssetConfig(dedupe="content"))

    assert store.block_bytes(output) == sum(map(len, contents))
    assert summary.counters["assets_deduplicated"] == ROWS - DISTINCT
    assert summary.counters["bytes_deduplicated"] == 9 * sum(map(len, contents))
    written = store.rows(output)
    assert [store.read(r["video"]) for r in written] == [
        contents[i % DISTINCT] for i in range(ROWS)
    ]
    assert len({(r["video"]["path"], r["video"]["offset"]) for r in written}) == DISTINCT


def test_without_dedupe_every_asset_is_stored(store):
    contents = _contents(2)
    url = store.put("same.y4m", contents[0])
    output, summary = _write(
        store, [{"i": i, "video": url} for i in range(5)], mdr.BlobAssetConfig()
    )
    assert store.block_bytes(output) == 5 * len(contents[0])
    assert summary.counters["assets_deduplicated"] == summary.counters["bytes_deduplicated"] == 0
    assert [r["video"]["offset"] for r in store.rows(output)] == [
        i * len(contents[0]) for i in range(5)
    ]


def _manifest_counters(store: Store, output: str) -> list[dict]:
    if store.bucket is None:
        paths = sorted(Path(output, "_refiner", "attempts").glob("*.json"))
        return [json.loads(p.read_text())["counters"] for p in paths]
    fs = s3fs.S3FileSystem(**store.options)
    return [
        json.loads(fs.cat_file(p))["counters"] for p in fs.glob(f"{output}/_refiner/attempts/*")
    ]


def test_source_dedupe_reads_a_repeated_object_once(tmp_path, s3_server, s3_bucket, s3_proxy):
    options = s3_proxy.storage_options()
    store = Store(tmp_path, options, s3_bucket)
    contents = _contents()
    urls = [store.put(f"clip_{i}.y4m", data) for i, data in enumerate(contents)]
    s3_proxy.clear()
    rows = [{"i": i, "video": urls[i % DISTINCT]} for i in range(ROWS)]
    output, summary = _write(store, rows, mdr.BlobAssetConfig(dedupe="source"))
    source_gets = [r for r in s3_proxy.records("GetObject") if "/src/" in r.path]
    assert len(source_gets) == DISTINCT
    assert summary.counters["assets_deduplicated"] == ROWS - DISTINCT
    assert [store.read(r["video"]) for r in store.rows(output)] == [
        contents[i % DISTINCT] for i in range(ROWS)
    ]


def test_source_dedupe_stores_a_file_again_once_it_changed(tmp_path):
    first, second = os.urandom(900), os.urandom(900)
    path = write_files(tmp_path / "src", {"clip.y4m": first})["clip.y4m"]

    def rewrite_at_row_50(row):
        if row.i == 50:
            Path(path).write_bytes(second)
            stat = os.stat(path)
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        return row

    out = tmp_path / "out"
    summary = (
        mdr.from_items(
            [{"i": i, "video": path} for i in range(ROWS)],
            items_per_shard=ROWS,
            dtypes={"video": dt.video_path()},
        )
        .with_max_block_rows(10)
        .map(rewrite_at_row_50)
        .write_parquet(str(out), assets=mdr.BlobAssetConfig(dedupe="source"))
        .launch_local()
        .summary
    )
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [mdr.read_blob(r["video"]) for r in rows] == [first] * 50 + [second] * 50
    assert summary.counters["block_bytes"] == 1800
    assert summary.counters["assets_deduplicated"] == ROWS - 2


def test_content_dedupe_of_large_streamed_assets(tmp_path):
    size = 9 * 1024 * 1024  # above the size read into memory: streamed into the block
    big = os.urandom(size)
    other = bytearray(big)
    other[-1] ^= 0xFF  # same size, one byte different
    paths = write_files(
        tmp_path / "src",
        {"a.bin": big, "b.bin": big, "c.bin": bytes(other), "d.bin": big[:-5], "e.bin": big},
    )
    names = ["a.bin", "b.bin", "c.bin", "d.bin", "e.bin"]
    out = tmp_path / "out"
    summary = (
        mdr.from_items(
            [{"i": i, "video": paths[n]} for i, n in enumerate(names)],
            dtypes={"video": dt.video_path()},
        )
        .write_parquet(str(out), assets=mdr.BlobAssetConfig(dedupe="content", checksum="sha256"))
        .launch_local()
        .summary
    )
    assert summary.counters["block_bytes"] == 3 * size - 5
    assert summary.counters["assets_deduplicated"] == 2
    assert summary.counters["bytes_deduplicated"] == 2 * size
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    expected = [big, big, bytes(other), big[:-5], big]
    assert [mdr.read_blob(r["video"], verify=True) for r in rows] == expected
    assert rows[0]["video"] == rows[1]["video"] == rows[4]["video"]


@pytest.mark.parametrize("mode", ["source", "content"])
@pytest.mark.parametrize("policy", ["error", "set_null", "drop_row"])
def test_dedupe_with_lists_of_assets_under_every_missing_policy(tmp_path, mode, policy):
    contents = _contents(3)
    paths = [
        write_files(tmp_path / "src", {f"{i}.y4m": c})[f"{i}.y4m"] for i, c in enumerate(contents)
    ]
    missing = str(tmp_path / "src" / "gone.y4m")
    rows = [{"i": i, "frames": [paths[i % 3], paths[(i + 1) % 3], paths[0]]} for i in range(12)]
    if policy != "error":
        rows[5]["frames"][1] = missing
    out = tmp_path / "out"
    summary = (
        mdr.from_items(rows, dtypes={"frames": dt.list_(dt.image_path())})
        .write_parquet(str(out), assets=mdr.BlobAssetConfig(dedupe=mode, missing_policy=policy))
        .launch_local()
        .summary
    )
    assert summary.counters["block_bytes"] == sum(map(len, contents))
    written = sorted(read_rows(out), key=lambda r: r["i"])
    expected_rows = [r for r in rows if not (policy == "drop_row" and r["i"] == 5)]
    assert [r["i"] for r in written] == [r["i"] for r in expected_rows]
    for row, source in zip(written, expected_rows, strict=True):
        for ref, path in zip(row["frames"], source["frames"], strict=True):
            if path == missing:
                assert ref is None
            else:
                assert mdr.read_blob(ref) == contents[paths.index(path)]
    # every asset that was read counts, also those of a row dropped by a later element
    read = 36 - (1 if policy != "error" else 0)
    assert summary.counters["assets_deduplicated"] == read - 3


def test_a_coalesced_whole_blob_copy_is_not_deduplicated_again(tmp_path):
    contents = _contents(6)
    paths = list(
        write_files(tmp_path / "src", {f"{i}.bin": c for i, c in enumerate(contents)}).values()
    )
    packed = tmp_path / "packed"
    mdr.from_items(
        [{"i": i, "video": paths[i % 6]} for i in range(12)], dtypes={"video": dt.video_path()}
    ).write_parquet(str(packed), assets=mdr.BlobAssetConfig(target_bytes=2500)).launch_local()
    source_blocks = blocks(packed)
    assert len(source_blocks) > 2

    out = tmp_path / "repacked"
    summary = (
        mdr.read_parquet(str(packed))
        .write_parquet(str(out), assets=mdr.BlobAssetConfig(target_bytes=2500, dedupe="content"))
        .launch_local()
        .summary
    )
    assert summary.counters["blobs_coalesced"] == len(source_blocks)
    assert summary.counters["references_coalesced"] == 12
    assert summary.counters["assets_deduplicated"] == 0
    assert [b.read_bytes() for b in blocks(out)] == [b.read_bytes() for b in source_blocks]
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [mdr.read_blob(r["video"]) for r in rows] == [contents[i % 6] for i in range(12)]

    # a per-range re-pack of the same references does store each distinct range once
    ranged = tmp_path / "ranged"
    summary = (
        mdr.read_parquet(str(packed))
        .write_parquet(
            str(ranged), assets=mdr.BlobAssetConfig(dedupe="content", missing_policy="set_null")
        )
        .launch_local()
        .summary
    )
    assert summary.counters["blobs_coalesced"] == 0
    assert summary.counters["assets_deduplicated"] == 6
    assert summary.counters["block_bytes"] == sum(map(len, contents))


def test_dedupe_never_crosses_attempts_so_removing_a_rejected_attempt_keeps_rows(tmp_path):
    contents = _contents(4)
    paths = list(
        write_files(tmp_path / "src", {f"{i}.y4m": c for i, c in enumerate(contents)}).values()
    )
    out = tmp_path / "out"
    sequence = mdr.from_items(
        [{"i": i, "video": paths[i % 4]} for i in range(20)],
        items_per_shard=20,
        dtypes={"video": dt.video_path()},
    ).write_parquet(str(out), assets=mdr.BlobAssetConfig(dedupe="content"))
    write, finalize = sequence.stages[0], sequence.stages[-1]
    run_id = "0123456789ab"
    shards = write.plan(run_id)
    first = write.run_task(shards, run_id=run_id)[0]
    second = write.run_task(shards, run_id=run_id)[0]
    assert first.counters["assets_deduplicated"] == 16
    assert second.counters["assets_deduplicated"] == 16  # nothing reused from the first
    # make the first attempt the rejected one: its blocks are the ones that go
    manifest = out / "_refiner" / "attempts" / f"{first.shard_id}__{first.attempt_id}.json"
    record = json.loads(manifest.read_text())
    record["completed_at"] = second.completed_at + 60
    manifest.write_text(json.dumps(record))

    result = finalize.run(run_id=run_id)

    assert result.rejected_attempts_removed == 1
    assert not (out / "assets" / f"{first.shard_id}__{first.attempt_id}").exists()
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    kept = f"{second.shard_id}__{second.attempt_id}"
    assert all(f"/assets/{kept}/" in r["video"]["path"] for r in rows)
    assert [mdr.read_blob(r["video"]) for r in rows] == [contents[i % 4] for i in range(20)]
    assert result.counters["assets_deduplicated"] == 16
    assert result.counters["bytes_deduplicated"] == 4 * sum(map(len, contents))


def _crc32c_collision(data: bytes) -> bytes:
    """Other bytes of the same length and the same CRC32C as ``data`` (CRC is affine over
    GF(2): flip a prefix byte, then solve for the 32 bits of the tail that cancel it)."""

    def linear(x: bytes) -> int:
        return google_crc32c.value(x) ^ google_crc32c.value(bytes(len(x)))

    n = len(data)
    change = bytearray(n)
    change[0] = 0x5A
    target = linear(bytes(change))
    # columns: the effect of each of the tail's 32 bits
    rows = []
    for bit in range(32):
        tail = bytearray(n)
        tail[n - 4 + bit // 8] = 1 << (bit % 8)
        rows.append((linear(bytes(tail)), 1 << bit))
    solution, basis = 0, []
    for effect, chosen in rows:  # Gaussian elimination over GF(2)
        for b_effect, b_chosen in basis:
            if effect ^ b_effect < effect:
                effect, chosen = effect ^ b_effect, chosen ^ b_chosen
        if effect:
            basis.append((effect, chosen))
    basis.sort(reverse=True)
    remaining = target
    for b_effect, b_chosen in basis:
        if remaining ^ b_effect < remaining:
            remaining, solution = remaining ^ b_effect, solution ^ b_chosen
    assert remaining == 0
    for bit in range(32):
        if solution >> bit & 1:
            change[n - 4 + bit // 8] ^= 1 << (bit % 8)
    other = bytes(a ^ b for a, b in zip(data, change, strict=True))
    assert other != data and google_crc32c.value(other) == google_crc32c.value(data)
    return other


def test_content_dedupe_never_merges_different_bytes_whose_digests_collide(store):
    first = os.urandom(1000)
    colliding = _crc32c_collision(first)
    urls = [
        store.put("a.bin", first),
        store.put("b.bin", colliding),
        store.put("c.bin", first),
        store.put("d.bin", colliding),
    ]
    rows = [{"i": i, "video": u} for i, u in enumerate(urls)]
    output, summary = _write(store, rows, mdr.BlobAssetConfig(dedupe="content"))
    assert summary.counters["block_bytes"] == 2000
    assert summary.counters["assets_deduplicated"] == 2
    written = store.rows(output)
    assert [store.read(r["video"]) for r in written] == [first, colliding, first, colliding]
    assert written[0]["video"] == written[2]["video"] != written[1]["video"]


def test_source_dedupe_of_blob_references_keys_on_path_and_range(store):
    contents = _contents(6)
    urls = [store.put(f"{i}.bin", c) for i, c in enumerate(contents)]
    packed, _ = _write(
        store, [{"i": i, "video": u} for i, u in enumerate(urls)], mdr.BlobAssetConfig(), "packed"
    )
    refs = [r["video"] for r in store.rows(packed)]
    assert len({r["path"] for r in refs}) == 1  # one block, six ranges of it
    rows = [{"i": i, "video": refs[i % 6]} for i in range(30)]
    output = store.output("repacked")
    summary = (
        mdr.from_items(rows, items_per_shard=30, dtypes={"video": dt.blob_reference("video")})
        .write_parquet(
            output,
            assets=mdr.BlobAssetConfig(dedupe="source", missing_policy="set_null"),
            storage_options=store.options,
        )
        .launch_local()
        .summary
    )
    assert summary.counters["blobs_coalesced"] == 0 and summary.counters["ranges_copied"] == 6
    assert summary.counters["assets_deduplicated"] == 24
    assert summary.counters["block_bytes"] == sum(map(len, contents))
    assert [store.read(r["video"]) for r in store.rows(output)] == [
        contents[i % 6] for i in range(30)
    ]
