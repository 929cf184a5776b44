"""Blob reads of untrusted references: the source policy, range checks before allocation,
and errors that name the reference."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

import refiner_core as mdr
from refiner_core.sinks.assets.sources import RefusedSource
from tests.s3_fixtures import *  # noqa: F403

DATA = bytes(range(256)) * 4  # 1,024 bytes


def read_one(ref, **options) -> bytes | None:
    return mdr.read_blob(ref, **options)


def read_many(ref, **options) -> bytes | None:
    return mdr.read_blobs([ref], **options)[0]


def read_streamed(ref, **options) -> bytes | None:
    return next(iter(mdr.iter_blobs([ref], **options)))


READERS = {"read_blob": read_one, "read_blobs": read_many, "iter_blobs": read_streamed}


@pytest.fixture
def blob(tmp_path) -> str:
    path = tmp_path / "tables" / "block-00000.bin"
    path.parent.mkdir()
    path.write_bytes(DATA)
    return str(path)


@pytest.fixture
def no_process_sources():
    yield
    mdr.io.set_read_sources(None)


def hostile_paths(tmp_path: Path) -> list[str]:
    link = tmp_path / "innocent.bin"
    link.symlink_to("/proc/self/environ")
    return [
        "/proc/self/environ",
        "file:///proc/self/environ",
        "simplecache::file:///proc/self/environ",
        str(link),
        "/dev/zero",
    ]


@pytest.mark.parametrize("reader", sorted(READERS))
def test_reads_of_pseudo_filesystems_are_refused(reader, tmp_path):
    for path in hostile_paths(tmp_path):
        ref = {"path": path, "offset": 0, "size": 64}
        with pytest.raises(RefusedSource, match="pseudo-filesystem") as refused:
            READERS[reader](ref)
        message = str(refused.value)
        assert repr(path) in message and "blob reads refuse it" in message
        assert "set_read_sources" in message and "allowed_sources" in message


@pytest.mark.parametrize("reader", sorted(READERS))
def test_allowed_sources_per_call_and_per_process(reader, blob, tmp_path, no_process_sources):
    elsewhere = tmp_path / "elsewhere.bin"
    elsewhere.write_bytes(b"private bytes")
    ours = {"path": blob, "offset": 3, "size": 5}
    theirs = {"path": str(elsewhere), "offset": 0, "size": 7}
    folder = str(Path(blob).parent)
    read = READERS[reader]

    assert read(ours, allowed_sources=[folder]) == DATA[3:8]
    with pytest.raises(RefusedSource, match="outside allowed_sources"):
        read(theirs, allowed_sources=[folder])

    mdr.io.set_read_sources([folder])
    assert mdr.io.read_sources() == (folder,)
    assert read(ours) == DATA[3:8]
    with pytest.raises(RefusedSource, match="outside allowed_sources") as refused:
        read(theirs)
    assert str(elsewhere) in str(refused.value)
    mdr.io.set_read_sources(None)
    assert read(theirs) == b"private"


def test_a_batch_with_one_refused_reference_reads_nothing(blob, tmp_path, no_process_sources):
    refs = [
        {"path": blob, "offset": 0, "size": 4},
        {"path": "/proc/self/environ", "offset": 0, "size": 8},
    ]
    with pytest.raises(RefusedSource):
        mdr.read_blobs(refs)
    with pytest.raises(ValueError, match="allowed_sources"):
        mdr.io.set_read_sources("/data")


def test_s3_reads_outside_allowed_prefixes_are_refused(s3_server, s3_bucket, s3_storage_options):
    client = s3_server.client()
    client.put_object(Bucket=s3_bucket, Key="media/block.bin", Body=DATA)
    client.put_object(Bucket=s3_bucket, Key="secrets/keys.txt", Body=b"secret")
    allowed = [f"s3://{s3_bucket}/media/"]
    ref = {"path": f"s3://{s3_bucket}/media/block.bin", "offset": 10, "size": 6}
    options = {"storage_options": s3_storage_options, "allowed_sources": allowed}
    assert mdr.read_blob(ref, **options) == DATA[10:16]
    other = {"path": f"s3://{s3_bucket}/secrets/keys.txt", "offset": 0, "size": 6}
    for reader in READERS.values():
        with pytest.raises(RefusedSource, match="outside allowed_sources"):
            reader(other, **options)


OVERSIZED = [
    (0, 2**62),
    (0, 8 * 1024**3),
    (2**63 - 1, 1),
    (len(DATA) - 1, 4 * 1024**3),
]


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(("offset", "size"), OVERSIZED)
def test_oversized_ranges_fail_before_allocating(reader, offset, size, blob):
    ref = {"path": blob, "offset": offset, "size": size}
    tracemalloc.start()
    try:
        with pytest.raises(EOFError) as caught:
            READERS[reader](ref)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, f"{peak} bytes allocated for a {len(DATA)}-byte blob"
    message = str(caught.value)
    assert blob in message and f"[{offset}, {offset + size})" in message
    assert f"has {len(DATA)} bytes" in message


def test_read_errors_name_the_reference(tmp_path):
    missing = str(tmp_path / "gone.bin")
    with pytest.raises(FileNotFoundError) as caught:
        mdr.read_blob({"path": missing, "offset": 5, "size": 9})
    assert f"{missing!r} [5, 14) (offset 5, size 9)" in str(caught.value)
