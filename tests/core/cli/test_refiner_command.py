"""The ``refiner`` console script on local and moto-S3 outputs, run as a user would."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import s3fs

import refiner_core as mdr
from tests.s3_fixtures import s3_bucket, s3_proxy, s3_server, s3_storage_options  # noqa: F401

REFINER = Path(sys.executable).parent / "refiner"


def png(width: int, height: int, shade: int) -> bytes:
    """A real grey PNG of ``width`` x ``height``."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    rows = b"".join(b"\x00" + bytes([shade]) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def refiner(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REFINER), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def images(folder: Path, n: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"img_{i:02d}.png"
        path.write_bytes(png(8 + i, 6, 40 * i % 256))
        paths.append(str(path))
    return paths


def packed_output(tmp_path: Path, n: int = 6) -> tuple[Path, list[str]]:
    paths = images(tmp_path / "src", n)
    out = tmp_path / "out"
    pipeline = mdr.from_items(
        [{"i": i, "image": p} for i, p in enumerate(paths)],
        items_per_shard=3,
        dtypes={"image": mdr.datatype.image_path()},
    )
    pipeline.write_parquet(str(out), assets=mdr.BlobAssetConfig(target_bytes=200)).launch_local()
    return out, paths


def test_inspect_shows_rows_shards_blocks_counters_and_files(tmp_path: Path) -> None:
    out, _ = packed_output(tmp_path)
    done = refiner("inspect", str(out))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    summary = json.loads((out / "_refiner" / "summary.json").read_text())
    assert "finalized" in text and "parquet" in text
    assert re.search(rf"│ shards\s+│ {summary['shards']}\s", text)
    assert "image" in text and "blob" in text  # the asset column, its kind and form
    assert re.search(rf"│ image\s+│\s+{summary['blocks_written']} │", text)  # its blocks
    for counter in ("rows_written", "blocks_written", "blobs_coalesced", "cells_nulled"):
        assert counter in text
    assert "references rewritten into a blob that was copied whole" in text  # meanings
    assert str(out / "_refiner" / "summary.json") in text


def test_verify_passes_then_names_the_row_of_a_truncated_block(tmp_path: Path) -> None:
    out, _ = packed_output(tmp_path)
    done = refiner("verify", str(out))
    assert done.returncode == 0, done.stderr
    assert "OK: 6 rows, 6 blob references" in done.stdout

    # Cut the block the last row of the second shard points into.
    table = pq.read_table(next(out.glob("00001__*.parquet")))
    ref = table.column("image").to_pylist()[-1]
    block = Path(ref["path"])
    block.write_bytes(block.read_bytes()[: ref["offset"] + ref["size"] - 1])
    done = refiner("verify", str(out))
    assert done.returncode == 1
    message = done.stderr
    assert "FAILED: 1 problem(s)" in message
    file = next(out.glob("00001__*.parquet")).name
    row_in_file = table.num_rows - 1
    assert f"row {3 + row_in_file} ({file}, row {row_in_file} of that file)" in message
    assert f"column image: {block} [{ref['offset']}, {ref['offset'] + ref['size']})" in message
    assert f"the block, which has {ref['offset'] + ref['size'] - 1} bytes" in message


def test_verify_names_a_missing_copied_file(tmp_path: Path) -> None:
    paths = images(tmp_path / "src", 3)
    out = tmp_path / "copied"
    pipeline = mdr.from_items(
        [{"image": p} for p in paths], dtypes={"image": mdr.datatype.image_path()}
    )
    pipeline.write_parquet(str(out), assets=mdr.FileAssetConfig()).launch_local()
    assert refiner("verify", str(out)).returncode == 0
    copied = mdr.read_parquet(str(out)).materialize()[1]["image"]
    os.remove(copied)
    done = refiner("verify", str(out))
    assert done.returncode == 1
    assert (
        "row 1 (" in done.stderr
        and f"column image: {copied}: the file does not exist" in done.stderr
    )


def test_a_folder_that_is_no_output_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    done = refiner("inspect", str(tmp_path / "plain"))
    assert done.returncode == 1
    assert f"{tmp_path / 'plain'} is not a refiner output" in done.stderr
    assert "_refiner/" in done.stderr and "_current.json" in done.stderr
    done = refiner("verify", str(tmp_path / "absent"))
    assert done.returncode == 1 and "does not exist" in done.stderr


def test_preview_writes_a_page_with_the_images(tmp_path: Path) -> None:
    out, paths = packed_output(tmp_path)
    page = tmp_path / "report.html"
    done = refiner("preview", str(out), "--html", str(page), "--sample", "4")
    assert done.returncode == 0, done.stderr
    assert "(4 images)" in done.stdout
    html = page.read_text()
    assert html.count("<img ") == 4 and 'data-images-embedded="4"' in html
    assert "Block fill" in html and "<svg" in html and "blobs_coalesced" in html
    assert not list(tmp_path.glob("report.html.tmp-*"))


def s3_dataset(bucket: str, options: dict[str, Any], tmp_path: Path) -> tuple[str, list[str]]:
    paths = images(tmp_path / "src", 5)
    url = f"s3://{bucket}/datasets/episodes"
    pipeline = mdr.from_items(
        [{"i": i, "image": p} for i, p in enumerate(paths)],
        items_per_shard=5,
        dtypes={"image": mdr.datatype.image_path()},
    )
    assets = mdr.BlobAssetConfig(target_bytes=1 << 20)
    pipeline.write_parquet(url, assets=assets, storage_options=options).launch_local()
    return url, paths


def test_inspect_verify_preview_on_s3(
    s3_bucket: str,  # noqa: F811
    s3_storage_options: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, paths = s3_dataset(s3_bucket, s3_storage_options, tmp_path)
    location = [
        "--endpoint-url",
        s3_storage_options["endpoint_url"],
        "-o",
        'client_kwargs={"region_name": "us-east-1"}',  # a JSON value
    ]
    done = refiner("inspect", url, *location)
    assert done.returncode == 0, done.stderr
    assert f"{url}/_refiner/summary.json" in done.stdout and "finalized" in done.stdout

    done = refiner("verify", url, *location)
    assert done.returncode == 0, done.stderr
    assert "OK: 5 rows, 5 blob references" in done.stdout

    page = tmp_path / "s3.html"
    done = refiner("preview", url, *location, "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert page.read_text().count("<img ") == 5

    # Truncate the one block on S3: every row after the cut fails, the first is named.
    fs = s3fs.S3FileSystem(**s3_storage_options)
    (block,) = [p for p in fs.find(f"{s3_bucket}/datasets/episodes/assets") if p.endswith(".bin")]
    data = fs.cat_file(block)
    sizes = [len(Path(p).read_bytes()) for p in paths]
    fs.pipe_file(block, data[: sum(sizes[:3])])
    done = refiner("verify", url, *location)
    assert done.returncode == 1
    assert "FAILED: 2 problem(s)" in done.stderr
    assert (
        "row 3 (" in done.stderr and f"column image: s3://{block} [{sum(sizes[:3])}," in done.stderr
    )


def test_verify_reads_checksummed_references_in_batched_ranged_reads(
    s3_bucket: str,  # noqa: F811
    s3_proxy,  # noqa: F811
    tmp_path: Path,
) -> None:
    options = s3_proxy.storage_options()
    paths = images(tmp_path / "src", 24)
    url = f"s3://{s3_bucket}/datasets/checked"
    mdr.from_items(
        [{"i": i, "image": p} for i, p in enumerate(paths)],
        items_per_shard=24,
        dtypes={"image": mdr.datatype.image_path()},
    ).write_parquet(
        url,
        assets=mdr.BlobAssetConfig(target_bytes=1 << 20, checksum="sha256"),
        storage_options=options,
    ).launch_local()
    s3_proxy.clear()
    location = ["--endpoint-url", s3_proxy.endpoint_url]
    done = refiner("verify", url, *location)
    assert done.returncode == 0, done.stderr
    assert "24 blob references, 0 file paths, 24 checksums" in done.stdout
    block_reads = [
        r for r in s3_proxy.records("GetObject") if r.path.endswith(".bin")
    ]  # the 24 adjacent references of one block: one merged ranged read, not 24
    assert 1 <= len(block_reads) <= 2, [r.path for r in block_reads]
