"""mdr.read_blobs / mdr.iter_blobs: the same bytes as a loop of read_blob, in far fewer reads."""

from __future__ import annotations

import os
import random

import pytest
import s3fs

import refiner_core as mdr
from tests.s3_fixtures import *  # noqa: F403

BLOCKS = 4
REFERENCES = 1000


def _blocks(put, rng: random.Random) -> list[dict | None]:
    """Four blocks of 250 adjacent references of 1-3 KiB, shuffled, with nulls and a
    few repeated and overlapping references mixed in."""
    refs: list[dict | None] = []
    for b in range(BLOCKS):
        sizes = [1024 + rng.randrange(2048) for _ in range(REFERENCES // BLOCKS)]
        url = put(f"block-{b:05d}.bin", os.urandom(sum(sizes)))
        offset = 0
        for size in sizes:
            refs.append({"path": url, "offset": offset, "size": size})
            offset += size
    refs += [dict(refs[7]), {"path": refs[3]["path"], "offset": 10, "size": 5000}]
    refs += [{"path": refs[0]["path"], "offset": 3, "size": 0}]
    refs += [None] * 25
    rng.shuffle(refs)
    return refs


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path):
    """``(put(name, data) -> url, storage_options)`` for local files or moto S3."""
    if request.param == "local":

        def put_local(name: str, data: bytes) -> str:
            path = tmp_path / name
            path.write_bytes(data)
            return str(path)

        return put_local, None
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    options = server.storage_options()
    fs = s3fs.S3FileSystem(**options)

    def put_s3(name: str, data: bytes) -> str:
        url = f"s3://{bucket}/{name}"
        fs.pipe_file(url, data)
        return url

    return put_s3, options


def test_read_blobs_returns_what_a_loop_of_read_blob_returns_in_order(where):
    put, options = where
    refs = _blocks(put, random.Random(7))
    expected = [None if r is None else mdr.read_blob(r, storage_options=options) for r in refs]
    assert sum(r is None for r in expected) == 25
    assert mdr.read_blobs(refs, storage_options=options) == expected
    assert list(mdr.iter_blobs(refs, storage_options=options, max_buffer_bytes=64 * 1024)) == (
        expected
    )
    assert mdr.read_blobs(refs, storage_options=options, max_gap_bytes=0, max_in_flight=1) == (
        expected
    )
    assert mdr.read_blobs([]) == [] and list(mdr.iter_blobs(iter([]))) == []


def test_nearby_references_of_a_block_are_one_ranged_read(s3_server, s3_bucket, s3_proxy):
    options = s3_proxy.storage_options()
    fs = s3fs.S3FileSystem(**options)

    def put(name: str, data: bytes) -> str:
        fs.pipe_file(f"s3://{s3_bucket}/{name}", data)
        return f"s3://{s3_bucket}/{name}"

    refs = _blocks(put, random.Random(3))
    s3_proxy.clear()
    mdr.read_blobs(refs, storage_options=options)
    gets = s3_proxy.records("GetObject")
    assert len(gets) == BLOCKS  # 250 adjacent references per block: one read each
    block_bytes = {r["path"]: 0 for r in refs if r is not None}
    for r in refs:
        if r is not None:
            block_bytes[r["path"]] = max(block_bytes[r["path"]], r["offset"] + r["size"])
    assert sorted(g.response_bytes for g in gets) == sorted(block_bytes.values())

    # references further apart than max_gap_bytes are read separately
    path = next(iter(block_bytes))
    spaced = [{"path": path, "offset": o, "size": 100} for o in (0, 1000, 200_000)]
    expected = [mdr.read_blob(r, storage_options=options) for r in spaced]
    s3_proxy.clear()
    assert mdr.read_blobs(spaced, storage_options=options, max_gap_bytes=1000) == expected
    assert sorted(g.response_bytes for g in s3_proxy.records("GetObject")) == [100, 1100]


def test_errors_are_those_of_read_blob(tmp_path):
    block = tmp_path / "block.bin"
    block.write_bytes(b"0123456789")
    good = {"path": str(block), "offset": 0, "size": 4}
    with pytest.raises(ValueError, match="offset must be >= 0"):
        mdr.read_blobs([good, {"path": str(block), "offset": -1, "size": 1}])
    with pytest.raises(ValueError, match="non-empty string"):
        mdr.read_blobs([{"path": "", "offset": 0, "size": 1}])
    with pytest.raises(EOFError, match="reaches past the end: the blob has 10 bytes"):
        mdr.read_blobs([good, {"path": str(block), "offset": 8, "size": 4}])
    with pytest.raises(FileNotFoundError):
        mdr.read_blobs([good, {"path": str(tmp_path / "gone.bin"), "offset": 0, "size": 1}])
    with pytest.raises(ValueError, match="max_in_flight must be a positive integer"):
        mdr.read_blobs([good], max_in_flight=0)
    with pytest.raises(ValueError, match="max_gap_bytes must be an integer >= 0"):
        mdr.read_blobs([good], max_gap_bytes=-1)


def test_iter_blobs_streams_its_input_in_bounded_windows(tmp_path):
    block = tmp_path / "block.bin"
    data = os.urandom(100 * 1000)
    block.write_bytes(data)
    consumed = []

    def refs():
        for i in range(100):
            consumed.append(i)
            yield {"path": str(block), "offset": i * 1000, "size": 1000}

    stream = mdr.iter_blobs(refs(), max_buffer_bytes=10_000)
    first = next(stream)
    assert first == data[:1000]
    # the window in hand and the one read ahead (and the reference that closed it), not all 100
    assert len(consumed) <= 21
    rest = list(stream)
    assert b"".join([first, *rest]) == data and len(consumed) == 100
