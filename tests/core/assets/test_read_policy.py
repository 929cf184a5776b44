"""Blob reads of untrusted references: the source policy, range checks before allocation,
and errors that name the reference."""

from __future__ import annotations

import os
import tracemalloc
import uuid
from pathlib import Path

import pytest
import s3fs

import refiner_core as mdr
from refiner_core.io.source_policy import RefusedSource, SourcePolicy
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
        "local:///proc/self/environ",
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


def test_an_output_folder_on_dev_shm_reads_back_but_dev_stays_refused(tmp_path):
    if not os.path.ismount("/dev/shm"):
        pytest.skip("/dev/shm is not a mount of its own here")
    block = Path("/dev/shm") / f"refiner-test-{uuid.uuid4().hex}.bin"
    block.write_bytes(DATA)
    link = tmp_path / "to-environ.bin"
    link.symlink_to("/proc/self/environ")
    try:
        for reader in READERS.values():
            assert reader({"path": str(block), "offset": 1, "size": 3}) == DATA[1:4]
            for refused in ("/dev/zero", "/dev/null", str(link)):
                with pytest.raises(RefusedSource, match="pseudo-filesystem|regular file"):
                    reader({"path": refused, "offset": 0, "size": 8})
        # asset writers still refuse it: rows do not copy files out of /dev
        with pytest.raises(RefusedSource, match="pseudo-filesystem"):
            SourcePolicy().check(str(block))
    finally:
        block.unlink()


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


@pytest.fixture
def no_aws_credentials(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_SECURITY_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize("reader", ["read_blob", "read_blobs"])
def test_s3_read_without_credentials_says_how_to_pass_them(
    reader, s3_server, s3_bucket, no_aws_credentials
):
    key = f"blocks/{uuid.uuid4().hex}.bin"
    s3_server.client().put_object(Bucket=s3_bucket, Key=key, Body=DATA)
    url = f"s3://{s3_bucket}/{key}"
    options = {"endpoint_url": s3_server.endpoint_url, "anon": False}
    with pytest.raises(PermissionError) as caught:
        READERS[reader]({"path": url, "offset": 2, "size": 3}, storage_options=options)
    message = str(caught.value)
    assert url in message and "[2, 5)" in message
    assert "no credentials" in message and "storage_options={'key'" in message
    assert type(caught.value.__cause__).__name__ == "NoCredentialsError"
    assert "AWS_SECRET_ACCESS_KEY" in message and os.environ.get("AWS_ACCESS_KEY_ID") is None


def test_read_errors_keep_their_type_when_it_cannot_be_rebuilt():
    from refiner_core.io.read_sources import naming

    class ConnectorError(OSError):
        def __init__(self, key: str, os_error: OSError) -> None:
            super().__init__(os_error.errno, f"cannot connect to {key}")

    with pytest.raises(ConnectorError) as caught, naming("s3://b/block.bin", 4, 8, None):
        raise ConnectorError("host:443", OSError(111, "refused"))
    assert caught.value.__notes__ == [
        "while reading blob reference 's3://b/block.bin' [4, 12) (offset 4, size 8)"
    ]
