"""Checksummed references: BlobAssetConfig(checksum=...), read_blob(verify=True), re-packs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import google_crc32c
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs

import refiner_core as mdr
from refiner_core.io.checksum import checksum_of
from tests.s3_fixtures import *  # noqa: F403

from .media import blocks, data_files, read_rows, write_files

dt = mdr.datatype


def _expected(data: bytes, algorithm: str) -> str:
    if algorithm == "sha256":
        return "sha256:" + hashlib.sha256(data).hexdigest()
    return "crc32c:" + google_crc32c.value(data).to_bytes(4, "big").hex()


def _pack(tmp_path: Path, contents: list[bytes], config, name: str = "out", **kw) -> Path:
    paths = write_files(tmp_path / "src", {f"{i:02d}.bin": c for i, c in enumerate(contents)})
    out = tmp_path / name
    mdr.from_items(
        [{"i": i, "video": paths[f"{i:02d}.bin"]} for i in range(len(contents))],
        dtypes={"video": dt.video_path()},
        **kw,
    ).write_parquet(str(out), assets=config).launch_local()
    return out


def _flip(ref: dict, at: int = 0) -> None:
    with open(ref["path"], "r+b") as block:
        block.seek(ref["offset"] + at)
        byte = block.read(1)
        block.seek(ref["offset"] + at)
        block.write(bytes([byte[0] ^ 0x80]))


@pytest.mark.parametrize("algorithm", ["sha256", "crc32c"])
def test_references_gain_a_checksum_field_computed_from_the_bytes(tmp_path, algorithm):
    contents = [os.urandom(500 + i) for i in range(6)] + [b""]
    out = _pack(tmp_path, contents, mdr.BlobAssetConfig(checksum=algorithm))
    schema = pq.read_schema(data_files(out)[0])
    assert schema.field("video").type == pa.struct(
        [
            pa.field("path", pa.string()),
            pa.field("offset", pa.uint64()),
            pa.field("size", pa.uint64()),
            pa.field("checksum", pa.string()),
        ]
    )
    assert dt.asset_of(schema.field("video")).form == "blob"
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [r["video"]["checksum"] for r in rows] == [_expected(c, algorithm) for c in contents]
    assert [mdr.read_blob(r["video"], verify=True) for r in rows] == contents


def test_without_checksum_references_stay_path_offset_size(tmp_path):
    out = _pack(tmp_path, [b"abc"], mdr.BlobAssetConfig())
    assert pq.read_schema(data_files(out)[0]).field("video").type == dt.BLOB_REFERENCE_TYPE
    (row,) = read_rows(out)
    with pytest.raises(ValueError, match="has no checksum to verify"):
        mdr.read_blob(row["video"], verify=True)
    assert mdr.read_blob(row["video"]) == b"abc"


def test_a_flipped_byte_fails_verification_naming_the_reference(tmp_path):
    contents = [os.urandom(1000) for _ in range(4)]
    out = _pack(tmp_path, contents, mdr.BlobAssetConfig(checksum="sha256"))
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    ref = rows[2]["video"]
    _flip(ref, at=17)

    with pytest.raises(mdr.ChecksumMismatchError) as caught:
        mdr.read_blob(ref, verify=True)
    message = str(caught.value)
    assert ref["path"] in message and f"[{ref['offset']}, {ref['offset'] + 1000})" in message
    assert ref["checksum"] in message
    assert checksum_of(mdr.read_blob(ref), "sha256") in message
    # the default read stays one plain ranged read: no verification
    assert mdr.read_blob(ref) != contents[2] and len(mdr.read_blob(ref)) == 1000
    # the neighbours in the same block still verify
    assert mdr.read_blob(rows[1]["video"], verify=True) == contents[1]
    with pytest.raises(mdr.ChecksumMismatchError, match="checksum mismatch"):
        mdr.read_blobs([r["video"] for r in rows], verify=True)
    assert mdr.read_blobs([r["video"] for r in rows])[3] == contents[3]


def test_a_large_streamed_asset_is_checksummed_as_it_streams(tmp_path):
    big = os.urandom(9 * 1024 * 1024)
    out = _pack(tmp_path, [big, b"tail"], mdr.BlobAssetConfig(checksum="crc32c"))
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert rows[0]["video"]["checksum"] == _expected(big, "crc32c")
    assert mdr.read_blob(rows[0]["video"], verify=True) == big


def test_inline_bytes_and_lists_are_checksummed(tmp_path):
    out = tmp_path / "out"
    mdr.from_items(
        [{"i": 0, "thumb": b"png-bytes", "frames": [b"f0", None, b"f2"]}],
        dtypes={"thumb": dt.image_bytes(), "frames": dt.list_(dt.image_bytes())},
    ).write_parquet(str(out), assets=mdr.BlobAssetConfig(checksum="sha256")).launch_local()
    (row,) = read_rows(out)
    assert row["thumb"]["checksum"] == _expected(b"png-bytes", "sha256")
    assert [f and f["checksum"] for f in row["frames"]] == [
        _expected(b"f0", "sha256"),
        None,
        _expected(b"f2", "sha256"),
    ]


def test_a_coalesced_repack_keeps_checksums_identical(tmp_path):
    contents = [os.urandom(400 + 13 * i) for i in range(12)]
    packed = _pack(tmp_path, contents, mdr.BlobAssetConfig(target_bytes=2048, checksum="sha256"))
    before = sorted(read_rows(packed), key=lambda r: r["i"])

    out = tmp_path / "repacked"
    summary = (
        mdr.read_parquet(str(packed))
        .write_parquet(str(out), assets=mdr.BlobAssetConfig(target_bytes=2048, checksum="sha256"))
        .launch_local()
        .summary
    )
    assert (
        summary.counters["blobs_coalesced"] == len(blocks(packed))
        and summary.counters["ranges_copied"] == 0
    )
    after = sorted(read_rows(out), key=lambda r: r["i"])
    assert [r["video"]["checksum"] for r in after] == [r["video"]["checksum"] for r in before]
    assert [mdr.read_blob(r["video"], verify=True) for r in after] == contents


def test_repacks_carry_checksums_over_without_recomputing(tmp_path):
    contents = [os.urandom(300) for _ in range(4)]
    packed = _pack(tmp_path, contents, mdr.BlobAssetConfig(checksum="sha256"))
    # a recorded digest that no recomputation would give: only a carry-over keeps it
    table = pq.read_table(data_files(packed)[0])
    rows = table.to_pylist()
    marker = "sha256:" + "ab" * 32
    rows[1]["video"]["checksum"] = marker
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), data_files(packed)[0])

    for policy in ("error", "set_null"):  # whole-blob copy, then per-range copies
        out = tmp_path / f"repacked-{policy}"
        mdr.read_parquet(str(packed)).write_parquet(
            str(out), assets=mdr.BlobAssetConfig(checksum="sha256", missing_policy=policy)
        ).launch_local()
        checksums = [r["video"]["checksum"] for r in sorted(read_rows(out), key=lambda r: r["i"])]
        assert checksums[1] == marker
        assert checksums[0] == _expected(contents[0], "sha256")

    # another algorithm is computed from the bytes
    out = tmp_path / "as-crc32c"
    summary = (
        mdr.read_parquet(str(packed))
        .write_parquet(str(out), assets=mdr.BlobAssetConfig(checksum="crc32c"))
        .launch_local()
        .summary
    )
    assert summary.counters["blobs_coalesced"] == 0  # no carried crc32c: hashed range by range
    after = sorted(read_rows(out), key=lambda r: r["i"])
    assert [r["video"]["checksum"] for r in after] == [_expected(c, "crc32c") for c in contents]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"checksum": "md5"}, "checksum 'md5' is not one of 'sha256', 'crc32c'"),
        ({"dedupe": "bytes"}, "dedupe 'bytes' is not one of 'source', 'content'"),
    ],
)
def test_unknown_checksum_or_dedupe_is_refused_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        mdr.BlobAssetConfig(**options)
    if "checksum" in options:
        with pytest.raises(ValueError, match=message):
            mdr.FileAssetConfig(**options)


def test_verify_names_a_malformed_checksum(tmp_path):
    path = tmp_path / "block.bin"
    path.write_bytes(b"abc")
    ref = {"path": str(path), "offset": 0, "size": 3, "checksum": "md5:00"}
    with pytest.raises(ValueError, match="checksum algorithm"):
        mdr.read_blob(ref, verify=True)


def test_file_copies_record_checksums_in_a_sibling_column(tmp_path):
    contents = [os.urandom(200 + i) for i in range(3)]
    paths = list(
        write_files(tmp_path / "src", {f"{i}.bin": c for i, c in enumerate(contents)}).values()
    )
    out = tmp_path / "files"
    mdr.from_items(
        [{"i": i, "video": paths[i], "frames": [paths[0], None]} for i in range(3)],
        dtypes={"video": dt.video_path(), "frames": dt.list_(dt.image_path())},
    ).write_parquet(str(out), assets=mdr.FileAssetConfig(checksum="crc32c")).launch_local()
    table = pq.read_table(data_files(out)[0])
    assert table.column_names == ["i", "video", "video_checksum", "frames", "frames_checksum"]
    rows = sorted(table.to_pylist(), key=lambda r: r["i"])
    for row in rows:
        assert row["video_checksum"] == _expected(Path(row["video"]).read_bytes(), "crc32c")
        assert row["frames_checksum"] == [_expected(contents[0], "crc32c"), None]

    # copying the copies again replaces the column; a user column of that name is an error
    again = tmp_path / "again"
    mdr.read_parquet(str(out)).write_parquet(
        str(again), assets=mdr.FileAssetConfig(checksum="sha256")
    ).launch_local()
    assert pq.read_table(data_files(again)[0]).column_names == table.column_names
    clash = mdr.from_items(
        [{"video": paths[0], "video_checksum": "mine"}], dtypes={"video": dt.video_path()}
    ).write_parquet(str(tmp_path / "clash"), assets=mdr.FileAssetConfig(checksum="sha256"))
    with pytest.raises(mdr.StageFailed, match="already has a column of that name; rename it"):
        clash.launch_local()
    assert not data_files(tmp_path / "clash")
    assert not list((tmp_path / "clash").glob("assets/*/*/*"))  # nothing was copied


def test_checksummed_packing_on_s3_verifies_and_detects_a_flip(
    tmp_path, s3_server, s3_bucket, s3_storage_options
):
    contents = [os.urandom(2000 + i) for i in range(5)]
    fs = s3fs.S3FileSystem(**s3_storage_options)
    urls = []
    for i, data in enumerate(contents):
        urls.append(f"s3://{s3_bucket}/src/{i}.bin")
        fs.pipe_file(urls[-1], data)
    out = f"s3://{s3_bucket}/packed"
    mdr.from_items(
        [{"i": i, "video": u} for i, u in enumerate(urls)], dtypes={"video": dt.video_path()}
    ).write_parquet(
        out, assets=mdr.BlobAssetConfig(checksum="sha256"), storage_options=s3_storage_options
    ).launch_local()
    rows = sorted(
        mdr.read_parquet(out, storage_options=s3_storage_options).materialize(),
        key=lambda r: r.i,
    )
    refs = [r.video for r in rows]
    assert [mdr.read_blob(r, verify=True, storage_options=s3_storage_options) for r in refs] == (
        contents
    )
    block = refs[0]["path"]
    data = bytearray(fs.cat_file(block))
    data[refs[3]["offset"] + 5] ^= 0x01
    fs.pipe_file(block, bytes(data))
    with pytest.raises(mdr.ChecksumMismatchError, match=f"'{block}' \\[{refs[3]['offset']}"):
        mdr.read_blob(refs[3], verify=True, storage_options=s3_storage_options)
    assert mdr.read_blob(refs[2], verify=True, storage_options=s3_storage_options) == contents[2]


@pytest.mark.filterwarnings("ignore:lance is not fork-safe")
@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "lance"])
def test_every_writer_keeps_checksummed_deduplicated_references(tmp_path, fmt):
    contents = [os.urandom(300 + i) for i in range(3)]
    paths = list(
        write_files(tmp_path / "src", {f"{i}.bin": c for i, c in enumerate(contents)}).values()
    )
    out = tmp_path / f"out.{fmt}"
    pipeline = mdr.from_items(
        [{"i": i, "video": paths[i % 3]} for i in range(9)], dtypes={"video": dt.video_path()}
    )
    config = mdr.BlobAssetConfig(checksum="crc32c", dedupe="source")
    summary = getattr(pipeline, f"write_{fmt}")(str(out), assets=config).launch_local().summary
    assert summary.counters["assets_deduplicated"] == 6
    if fmt == "parquet":
        back = mdr.read_parquet(str(out))
    elif fmt == "jsonl":
        back = mdr.read_jsonl(str(out), dtypes={"video": dt.blob_reference("video", checksum=True)})
    else:
        back = mdr.read_lance(str(out))
    rows = sorted(back.materialize(), key=lambda r: r.i)
    assert [mdr.read_blob(r.video, verify=True) for r in rows] == [
        contents[i % 3] for i in range(9)
    ]
    assert [r.video["checksum"] for r in rows] == [
        _expected(contents[i % 3], "crc32c") for i in range(9)
    ]
