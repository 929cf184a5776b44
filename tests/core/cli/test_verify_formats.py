"""``refiner verify`` on JSONL and Lance outputs, and on references that carry checksums."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import refiner_core as mdr
from refiner_core.io import checksum_of

from .test_refiner_command import images, refiner


def crc32c(data: bytes) -> str:
    return checksum_of(data, "crc32c").partition(":")[2]


@pytest.mark.parametrize("writer", ["write_jsonl", "write_lance"])
def test_truncated_block_is_named_by_row(tmp_path: Path, writer: str) -> None:
    paths = images(tmp_path / "src", 4)
    out = tmp_path / ("out.lance" if writer == "write_lance" else "out")
    pipeline = mdr.from_items(
        [{"i": i, "image": p} for i, p in enumerate(paths)],
        dtypes={"image": mdr.datatype.image_path()},
    )
    getattr(pipeline, writer)(str(out), assets=mdr.BlobAssetConfig()).launch_local()
    done = refiner("verify", str(out))
    assert done.returncode == 0, done.stderr
    assert "OK: 4 rows, 4 blob references" in done.stdout
    inspected = refiner("inspect", str(out))
    assert inspected.returncode == 0 and "image" in inspected.stdout

    rows = list(mdr.read_jsonl(str(out)).iter_rows()) if writer == "write_jsonl" else None
    rows = rows or list(mdr.read_lance(str(out)).iter_rows())
    last = max(rows, key=lambda r: r["image"]["offset"])
    block = Path(last["image"]["path"])
    block.write_bytes(block.read_bytes()[: last["image"]["offset"]])
    done = refiner("verify", str(out))
    assert done.returncode == 1
    row = [r["i"] for r in rows].index(last["i"])
    assert f"row {row} (" in done.stderr and f"column image: {block}" in done.stderr
    assert "reaches past the end of the block" in done.stderr


def test_checksums_are_checked_when_references_carry_them(tmp_path: Path) -> None:
    block = tmp_path / "block.bin"
    block.write_bytes(b"abcdefgh")
    good = [
        {
            "path": str(block),
            "offset": 0,
            "size": 3,
            "checksum": f"sha256:{hashlib.sha256(b'abc').hexdigest()}",
        },
        {"path": str(block), "offset": 3, "size": 5, "checksum": f"crc32c:{crc32c(b'defgh')}"},
    ]
    out = tmp_path / "refs"
    mdr.from_items([{"ref": r} for r in good]).write_parquet(str(out)).launch_local()
    done = refiner("verify", str(out))
    assert done.returncode == 0, done.stderr
    assert "2 blob references, 0 file paths, 2 checksums" in done.stdout

    block.write_bytes(b"abcdefgX")  # same size, one byte changed: only the digest can tell
    done = refiner("verify", str(out))
    assert done.returncode == 1
    assert "row 1 (" in done.stderr and f"column ref: {block} [3, 8)" in done.stderr
    assert f"crc32c is {crc32c(b'defgX')}, the reference says {crc32c(b'defgh')}" in done.stderr


def test_copied_files_of_a_jsonl_output_are_checked(tmp_path: Path) -> None:
    # JSONL keeps no asset marks: paths under the output's asset folders are checked anyway.
    paths = images(tmp_path / "src", 3)
    out = tmp_path / "out"
    pipeline = mdr.from_items(
        [{"image": p, "note": p} for p in paths], dtypes={"image": mdr.datatype.image_path()}
    )
    pipeline.write_jsonl(str(out), assets=mdr.FileAssetConfig()).launch_local()
    done = refiner("verify", str(out))
    assert done.returncode == 0, done.stderr
    assert "0 blob references, 3 file paths" in done.stdout  # "note" points outside: not one

    copied = [r["image"] for r in mdr.read_jsonl(str(out)).iter_rows()]
    Path(copied[2]).unlink()
    done = refiner("verify", str(out))
    assert done.returncode == 1
    assert (
        "row 2 (" in done.stderr
        and f"column image: {copied[2]}: the file does not exist" in done.stderr
    )
