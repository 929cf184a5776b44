"""Concurrent multipart writes through s3fs against a real moto S3 server over HTTP."""

from __future__ import annotations

import base64
import math
import random
import time
import zlib
from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree

import pytest
import s3fs
import s3fs.core
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem

from refiner_core.io import s3_multipart as s3mp
from tests.s3_fixtures import *  # noqa: F403
from tests.s3_server import MotoS3, max_in_flight

PART = 5 * 2**20
FAST_FAIL = {"config_kwargs": {"retries": {"mode": "standard", "total_max_attempts": 2}}}


def payload(size: int, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(size)


def write_in_pieces(f: Any, data: bytes, piece: int = 2**20 + 3) -> None:
    for start in range(0, len(data), piece):
        f.write(data[start : start + piece])


def filesystem(options: dict[str, Any], **extra: Any) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(default_block_size=PART, **options, **extra)


def completed_part_numbers(body: bytes | None) -> list[int]:
    assert body is not None
    return [
        int(n.text) for n in ElementTree.fromstring(body).iter() if n.tag.endswith("PartNumber")
    ]


def assert_nothing_left(s3_server: MotoS3, bucket: str) -> None:
    assert s3_server.keys(bucket) == []
    assert s3_server.open_uploads(bucket) == []


@pytest.fixture(autouse=True)
def installed() -> Iterator[None]:
    """install() for each test, then put back whatever class s3fs had before."""
    before = s3fs.core.S3File, s3fs.S3File
    s3mp.install()
    yield
    s3fs.core.S3File, s3fs.S3File = before


@pytest.fixture
def stock_s3file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3fs.core, "S3File", s3mp.BatchedS3File._refiner_stock_class)


def test_multipart_round_trip_is_byte_identical(s3_server, s3_bucket, s3_proxy) -> None:
    fs = filesystem(s3_proxy.storage_options())
    data = payload(22 * 2**20 + 11)
    with fs.open(f"{s3_bucket}/out/blob.bin", "wb") as f:
        assert isinstance(f, s3mp.BatchedS3File)
        write_in_pieces(f, data)

    assert fs.cat(f"{s3_bucket}/out/blob.bin") == data
    head = s3_server.client().head_object(Bucket=s3_bucket, Key="out/blob.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].strip('"').endswith("-5")
    parts = s3_proxy.records("UploadPart")
    assert {r.part_number: r.request_bytes for r in parts} == {
        1: PART,
        2: PART,
        3: PART,
        4: PART,
        5: len(data) - 4 * PART,
    }
    (complete,) = s3_proxy.records("CompleteMultipartUpload")
    assert completed_part_numbers(complete.body) == [1, 2, 3, 4, 5]
    assert s3_server.open_uploads(s3_bucket) == []


def count_parts_in_flight(fs: s3fs.S3FileSystem, bucket: str) -> dict[str, int]:
    """Count the UploadPart calls in flight as the client sees them (botocore events on
    the event loop's thread): ``now`` and the ``peak``."""
    fs.ls(bucket)  # starts the session and its client
    counts = {"now": 0, "peak": 0}

    def started(**_: Any) -> None:
        counts["now"] += 1
        counts["peak"] = max(counts["peak"], counts["now"])

    def ended(**_: Any) -> None:
        counts["now"] -= 1

    events = fs.s3.meta.events
    events.register("before-call.s3.UploadPart", started)
    events.register("after-call.s3.UploadPart", ended)
    events.register("after-call-error.s3.UploadPart", ended)
    return counts


def test_four_parts_are_in_flight_and_never_more(s3_bucket, s3_proxy) -> None:
    s3_proxy.latency_s = 0.1
    fs = filesystem(s3_proxy.storage_options())
    counts = count_parts_in_flight(fs, s3_bucket)
    data = payload(12 * PART + 3)
    with fs.open(f"{s3_bucket}/twelve-parts.bin", "wb") as f:
        write_in_pieces(f, data)

    parts = s3_proxy.records("UploadPart")
    assert sorted(r.part_number for r in parts) == list(range(1, 14))
    assert counts["peak"] == s3mp.WINDOW_PARTS == 4  # as the client counts them
    assert max_in_flight(parts, "UploadPart") == 4  # as the server saw them
    assert counts["now"] == 0
    assert fs.cat(f"{s3_bucket}/twelve-parts.bin") == data


def test_a_slow_part_holds_one_slot_while_the_writer_goes_on(s3_bucket, s3_proxy) -> None:
    slow = s3_proxy.inject("UploadPart", "delay", part_number=1, times=1, delay_s=4.0)
    fs = filesystem(s3_proxy.storage_options())
    data = payload(10 * PART + 5)
    with fs.open(f"{s3_bucket}/slow-first.bin", "wb") as f:
        write_in_pieces(f, data)
        written = time.monotonic()  # every part but the last sealed and sent

    assert slow.hits == 1
    parts = {r.part_number: r for r in s3_proxy.records("UploadPart")}
    assert sorted(parts) == list(range(1, 12))
    # In batches of four, part 5 would have waited for part 1; here parts 2-10 all went
    # through the three free slots and the writer finished while part 1 was in flight.
    assert max(parts[n].end for n in range(2, 11)) < parts[1].end
    assert written < parts[1].end
    assert max_in_flight(list(parts.values()), "UploadPart") == 4
    (complete,) = s3_proxy.records("CompleteMultipartUpload")
    assert complete.start >= parts[1].end
    assert completed_part_numbers(complete.body) == list(range(1, 12))
    assert fs.cat(f"{s3_bucket}/slow-first.bin") == data


def test_the_writer_waits_only_when_four_parts_are_in_flight(s3_bucket, s3_proxy) -> None:
    s3_proxy.inject("UploadPart", "delay", times=4, delay_s=3.0)  # parts 1-4 are slow
    fs = filesystem(s3_proxy.storage_options())
    data = payload(6 * PART)
    with fs.open(f"{s3_bucket}/bounded.bin", "wb") as f:
        write_in_pieces(f, data[: 4 * PART])  # four parts sealed, all in flight
        four_sent = time.monotonic()
        write_in_pieces(f, data[4 * PART : 5 * PART])  # the fifth waits for a slot
        fifth_sent = time.monotonic()
        write_in_pieces(f, data[5 * PART :])

    parts = {r.part_number: r for r in s3_proxy.records("UploadPart")}
    first_done = min(parts[n].end for n in range(1, 5))
    # No waiting while slots were free: all four went out before any came back.
    assert max(parts[n].start for n in range(1, 5)) < first_done
    assert four_sent < first_done
    assert fifth_sent >= first_done  # memory stays at four parts in flight plus one
    assert parts[5].start >= first_done
    assert fs.cat(f"{s3_bucket}/bounded.bin") == data


@pytest.mark.parametrize(
    "size",
    [PART - 1, PART, PART + 1, 4 * PART + 1, 5 * PART + 2**20 + 7, 9 * PART - 13],
)
def test_bytes_round_trip_whatever_the_size(s3_server, s3_bucket, s3_proxy, size) -> None:
    fs = filesystem(s3_proxy.storage_options())
    data = payload(size, seed=size)
    with fs.open(f"{s3_bucket}/sized.bin", "wb") as f:
        write_in_pieces(f, data, piece=777_777)

    assert fs.cat(f"{s3_bucket}/sized.bin") == data
    parts = math.ceil(size / PART)
    sizes = {r.part_number: r.request_bytes for r in s3_proxy.records("UploadPart")}
    if size < PART:  # one PutObject, as in stock s3fs
        assert sizes == {} and len(s3_proxy.records("PutObject")) == 1
    else:
        assert sizes == {n: min(PART, size - (n - 1) * PART) for n in range(1, parts + 1)}
        (complete,) = s3_proxy.records("CompleteMultipartUpload")
        assert completed_part_numbers(complete.body) == list(range(1, parts + 1))
    assert s3_server.open_uploads(s3_bucket) == []


def part_crc32s(data: bytes, part: int) -> list[bytes]:
    return [
        zlib.crc32(data[start : start + part]).to_bytes(4, "big")
        for start in range(0, len(data), part)
    ]


def composite_crc32(data: bytes, part: int) -> str:
    """S3's composite CRC32 of a multipart object: the CRC32 of its parts' CRC32s."""
    crc = zlib.crc32(b"".join(part_crc32s(data, part))).to_bytes(4, "big")
    return base64.b64encode(crc).decode()


def test_the_upload_declares_the_crc32_its_parts_carry(s3_server, s3_bucket, s3_proxy) -> None:
    fs = filesystem(s3_proxy.storage_options())
    data = payload(3 * PART + 5)
    with fs.open(f"{s3_bucket}/summed.bin", "wb") as f:
        write_in_pieces(f, data)

    attributes = s3_server.client().get_object_attributes(
        Bucket=s3_bucket, Key="summed.bin", ObjectAttributes=["Checksum"]
    )
    # S3 kept every part's checksum and combined them, rather than summing the object again.
    assert attributes["Checksum"]["ChecksumType"] == "COMPOSITE"
    assert attributes["Checksum"]["ChecksumCRC32"].split("-")[0] == composite_crc32(data, PART)
    (complete,) = s3_proxy.records("CompleteMultipartUpload")
    assert complete.body is not None
    named = [
        n.text for n in ElementTree.fromstring(complete.body).iter() if n.tag.endswith("CRC32")
    ]
    assert named == [base64.b64encode(crc).decode() for crc in part_crc32s(data, PART)]

    # With botocore's checksums only where required, no part carries one to declare.
    s3_proxy.clear()
    quiet = filesystem(
        s3_proxy.storage_options(config_kwargs={"request_checksum_calculation": "when_required"}),
        skip_instance_cache=True,
    )
    with quiet.open(f"{s3_bucket}/plain.bin", "wb") as f:
        write_in_pieces(f, data)
    attributes = s3_server.client().get_object_attributes(
        Bucket=s3_bucket, Key="plain.bin", ObjectAttributes=["Checksum"]
    )
    assert "ChecksumCRC32" not in attributes.get("Checksum", {})
    (complete,) = s3_proxy.records("CompleteMultipartUpload")
    assert complete.body is not None and b"Checksum" not in complete.body
    assert quiet.cat(f"{s3_bucket}/plain.bin") == fs.cat(f"{s3_bucket}/summed.bin") == data


def test_a_checksum_algorithm_the_caller_chose_is_kept(s3_server, s3_bucket, s3_proxy) -> None:
    fs = filesystem(s3_proxy.storage_options(), s3_additional_kwargs={"ChecksumAlgorithm": "SHA1"})
    data = payload(2 * PART + 1)
    with fs.open(f"{s3_bucket}/sha.bin", "wb") as f:
        write_in_pieces(f, data)

    # Complete names each part's SHA-1, as S3 requires of an upload created with one.
    (complete,) = s3_proxy.records("CompleteMultipartUpload")
    assert complete.body is not None and complete.body.count(b"<ChecksumSHA1>") == 3
    attributes = s3_server.client().get_object_attributes(
        Bucket=s3_bucket, Key="sha.bin", ObjectAttributes=["Checksum"]
    )
    assert set(attributes["Checksum"]) == {"ChecksumSHA1", "ChecksumType"}
    assert fs.cat(f"{s3_bucket}/sha.bin") == data


def test_small_file_is_one_put(s3_bucket, s3_proxy) -> None:
    fs = filesystem(s3_proxy.storage_options())
    with fs.open(f"{s3_bucket}/tiny.txt", "wb") as f:
        f.write(b"hello")

    kinds = [r.kind for r in s3_proxy.records()]
    assert kinds.count("PutObject") == 1
    assert not {"CreateMultipartUpload", "UploadPart"} & set(kinds)
    assert fs.cat(f"{s3_bucket}/tiny.txt") == b"hello"


def test_failed_upload_part_aborts(s3_server, s3_bucket, s3_proxy) -> None:
    s3_proxy.fail_upload_part = 2
    fs = filesystem(s3_proxy.storage_options(**FAST_FAIL))
    with (
        pytest.raises(OSError, match=rf"UploadPart 2 of s3://{s3_bucket}/broken\.bin failed"),
        fs.open(f"{s3_bucket}/broken.bin", "wb") as f,
    ):
        f.write(payload(9 * PART))

    # Part 2 fails on its retry too; every other part sent was waited for before the abort.
    attempts = [(r.part_number, r.status) for r in s3_proxy.records("UploadPart")]
    assert [a for a in attempts if a[0] == 2] == [(2, 500), (2, 500)]
    assert all(status == 200 for number, status in attempts if number != 2)
    (abort,) = s3_proxy.records("AbortMultipartUpload")
    assert abort.start >= max(r.end for r in s3_proxy.records("UploadPart"))
    assert s3_proxy.records("CompleteMultipartUpload") == []
    assert_nothing_left(s3_server, s3_bucket)


def test_a_part_failing_mid_upload_stops_the_writer_and_aborts(
    s3_server, s3_bucket, s3_proxy
) -> None:
    s3_proxy.latency_s = 0.05
    s3_proxy.inject("UploadPart", "fail", part_number=6)
    fs = filesystem(s3_proxy.storage_options(config_kwargs={"retries": {"total_max_attempts": 1}}))
    data = payload(20 * PART)
    written = 0
    with (
        pytest.raises(OSError, match=rf"S3 UploadPart 6 of s3://{s3_bucket}/mid\.bin failed"),
        fs.open(f"{s3_bucket}/mid.bin", "wb") as f,
    ):
        for start in range(0, len(data), PART // 2):
            f.write(data[start : start + PART // 2])
            written += PART // 2

    # The failure reached the writer in write(), long before its last byte: at most
    # the parts already in flight beside part 6 and one window more were sent.
    assert written < len(data) - 2 * PART
    sent = {r.part_number for r in s3_proxy.records("UploadPart")}
    assert set(range(1, 7)) <= sent <= set(range(1, 6 + 2 * s3mp.WINDOW_PARTS))
    (abort,) = s3_proxy.records("AbortMultipartUpload")
    assert abort.start >= max(r.end for r in s3_proxy.records("UploadPart"))
    assert s3_proxy.records("CompleteMultipartUpload") == []
    assert_nothing_left(s3_server, s3_bucket)


def test_retried_part_is_sent_whole(s3_server, s3_bucket, s3_proxy) -> None:
    # botocore gives up at once, so s3fs's own retry loop re-sends the same part object.
    s3_proxy.drop_upload_part_once = 3
    fs = filesystem(s3_proxy.storage_options(config_kwargs={"retries": {"total_max_attempts": 1}}))
    data = payload(4 * PART + 7)
    with fs.open(f"{s3_bucket}/retried.bin", "wb") as f:
        write_in_pieces(f, data)

    attempts = [(r.part_number, r.status) for r in s3_proxy.records("UploadPart")]
    assert sorted(attempts) == [(1, 200), (2, 200), (3, 0), (3, 200), (4, 200), (5, 200)]
    assert {r.request_bytes for r in s3_proxy.records("UploadPart") if r.part_number == 3} == {PART}
    assert fs.cat(f"{s3_bucket}/retried.bin") == data


def test_failed_complete_aborts(s3_server, s3_bucket, s3_proxy) -> None:
    s3_proxy.fail_complete = True
    fs = filesystem(s3_proxy.storage_options(**FAST_FAIL))
    with pytest.raises(OSError), fs.open(f"{s3_bucket}/broken.bin", "wb") as f:
        f.write(payload(2 * PART + 1))

    assert len(s3_proxy.records("CompleteMultipartUpload")) == 2  # first try and one retry
    assert len(s3_proxy.records("AbortMultipartUpload")) == 1
    assert_nothing_left(s3_server, s3_bucket)


@pytest.mark.parametrize("size", [5, 4 * PART + 1], ids=["single-put", "multipart"])
def test_user_exception_inside_with_leaves_nothing(s3_server, s3_bucket, s3_proxy, size) -> None:
    fs = filesystem(s3_proxy.storage_options())
    with (
        pytest.raises(RuntimeError, match="decoder crashed"),
        fs.open(f"{s3_bucket}/half.bin", "wb") as f,
    ):
        f.write(payload(size))
        f.flush()
        raise RuntimeError("decoder crashed")

    kinds = [r.kind for r in s3_proxy.records()]
    assert not {"PutObject", "CompleteMultipartUpload"} & set(kinds)
    if size > PART:  # four parts were in flight when the error came: awaited, then aborted
        assert kinds.count("UploadPart") == 4
        assert kinds.count("AbortMultipartUpload") == 1
    assert_nothing_left(s3_server, s3_bucket)


def test_stock_s3fs_commits_a_truncated_object(s3_server, s3_bucket, stock_s3file) -> None:
    fs = filesystem(s3_server.storage_options())
    with pytest.raises(RuntimeError), fs.open(f"{s3_bucket}/half.bin", "wb") as f:
        assert not isinstance(f, s3mp.BatchedS3File)
        f.write(b"first half")
        raise RuntimeError("decoder crashed")

    assert s3_server.keys(s3_bucket) == ["half.bin"]  # what install() prevents


@pytest.mark.parametrize(
    ("hint", "block", "expected"),
    [
        (None, 50 * 2**20, 50 * 2**20),
        (None, PART, PART),
        (0, PART, PART),
        (1, 2**20, PART),
        (100 * 2**30, 50 * 2**20, 50 * 2**20),
        (10_000 * 6 * 2**20, PART, 6 * 2**20),
        (10_000 * 6 * 2**20 + 1, PART, 6 * 2**20 + 1),
        (5 * 2**40, 50 * 2**20, math.ceil(5 * 2**40 / 10_000)),
    ],
)
def test_part_size_for(hint: int | None, block: int, expected: int) -> None:
    size = s3mp.part_size_for(hint, block)
    assert size == expected
    assert size >= s3mp.MIN_PART_SIZE or hint is None
    if hint:
        assert math.ceil(hint / size) <= 10_000


def test_part_size_hits_exactly_ten_thousand_parts() -> None:
    assert math.ceil(5 * 2**40 / s3mp.part_size_for(5 * 2**40, PART)) == 10_000
    assert 10_000 * 6 * 2**20 // s3mp.part_size_for(10_000 * 6 * 2**20, PART) == 10_000


def test_part_size_rejects_objects_over_5_tib() -> None:
    with pytest.raises(ValueError, match=r"5497558138881 bytes .*5 TiB"):
        s3mp.part_size_for(5 * 2**40 + 1, PART)
    with pytest.raises(ValueError, match="size_hint"):
        s3mp.part_size_for(-1, PART)


def test_open_output_applies_size_hint(s3_bucket, s3_proxy) -> None:
    fs = filesystem(s3_proxy.storage_options())
    data = payload(12 * 2**20)
    with s3mp.open_output(fs, f"{s3_bucket}/hinted.bin", size_hint=10_000 * 6 * 2**20) as f:
        assert isinstance(f, s3mp.BatchedS3File)
        assert f.blocksize == 6 * 2**20
        write_in_pieces(f, data)

    sizes = [r.request_bytes for r in s3_proxy.records("UploadPart")]
    assert sizes == [6 * 2**20, 6 * 2**20]
    assert fs.cat(f"{s3_bucket}/hinted.bin") == data
    with s3mp.open_output(fs, f"{s3_bucket}/unhinted.bin") as f:
        assert f.blocksize == PART
    dirfs = DirFileSystem(s3_bucket, fs=fs)
    with s3mp.open_output(dirfs, "under/dirfs.bin", size_hint=10_000 * 7 * 2**20) as f:
        assert isinstance(f, s3mp.BatchedS3File)
        assert f.blocksize == 7 * 2**20
        f.write(b"via dirfs")
    assert fs.cat(f"{s3_bucket}/under/dirfs.bin") == b"via dirfs"


def test_no_hint_past_max_parts_fails_and_aborts(
    s3_server, s3_bucket, s3_proxy, monkeypatch
) -> None:
    monkeypatch.setattr(s3mp, "MAX_PARTS", 3)
    monkeypatch.setattr(s3mp, "WINDOW_PARTS", 2)
    fs = filesystem(s3_proxy.storage_options())
    with fs.open(f"{s3_bucket}/exact.bin", "wb") as f:
        f.write(payload(3 * PART))  # exactly MAX_PARTS parts is fine
    assert fs.size(f"{s3_bucket}/exact.bin") == 3 * PART
    fs.rm(f"{s3_bucket}/exact.bin")
    s3_proxy.clear()

    with (
        pytest.raises(ValueError, match=r"too-big\.bin.*3 parts.*size_hint"),
        fs.open(f"{s3_bucket}/too-big.bin", "wb") as f,
    ):
        f.write(payload(3 * PART + 1))

    # parts 1-3 were full and sent before the byte that needs a fourth part
    assert sorted(r.part_number for r in s3_proxy.records("UploadPart")) == [1, 2, 3]
    assert len(s3_proxy.records("AbortMultipartUpload")) == 1
    assert_nothing_left(s3_server, s3_bucket)


def test_install_is_idempotent_and_scoped_to_s3(s3_storage_options) -> None:
    stock = s3mp.BatchedS3File._refiner_stock_class
    s3mp.install()
    installed_once = s3fs.core.S3File, s3fs.S3File
    s3mp.install()
    assert (s3fs.core.S3File, s3fs.S3File) == installed_once
    assert s3fs.core.S3File is s3mp.BatchedS3File is s3fs.S3File
    assert s3mp.BatchedS3File.__bases__ == (stock,)
    fs = filesystem(s3_storage_options)
    assert s3mp.install_if_s3(fs)
    assert s3mp.install_if_s3(DirFileSystem("bucket/prefix", fs=fs))
    assert not s3mp.install_if_s3(LocalFileSystem())
    assert s3fs.core.S3File is s3mp.BatchedS3File


def test_reads_are_unchanged(s3_server, s3_bucket, s3_proxy, monkeypatch) -> None:
    data = payload(3 * PART + 5)
    s3_server.client().put_object(Bucket=s3_bucket, Key="in.bin", Body=data)

    def read_pattern() -> tuple[bytes, bytes, list[str]]:
        s3fs.S3FileSystem.clear_instance_cache()
        s3_proxy.clear()
        fs = filesystem(s3_proxy.storage_options())
        with fs.open(f"{s3_bucket}/in.bin", "rb", block_size=PART) as f:
            f.seek(PART - 3)
            middle = f.read(10)
            f.seek(0)
            whole = f.read()
        return middle, whole, [r.kind for r in s3_proxy.records()]

    ours = read_pattern()
    monkeypatch.setattr(s3fs.core, "S3File", s3mp.BatchedS3File._refiner_stock_class)
    stock = read_pattern()
    assert ours == stock
    assert ours[0] == data[PART - 3 : PART + 7] and ours[1] == data


def test_open_output_on_local_disk(tmp_path) -> None:
    target = tmp_path / "a" / "b" / "blob.bin"
    with s3mp.open_output(LocalFileSystem(), str(target), size_hint=3) as f:
        f.write(b"abc")
    assert target.read_bytes() == b"abc"

    dirfs = DirFileSystem(str(tmp_path / "root"), fs=LocalFileSystem())
    (tmp_path / "root").mkdir()
    with s3mp.open_output(dirfs, "x/y/z.bin") as f:
        f.write(b"xyz")
    assert (tmp_path / "root" / "x" / "y" / "z.bin").read_bytes() == b"xyz"
