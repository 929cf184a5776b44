"""``mdr.read_blob``: exactly one ranged read of ``[offset, offset + size)``."""

from __future__ import annotations

import pytest

import refiner_core as mdr

from .http_server import FileServer

DATA = bytes(range(256)) * 40  # 10,240 bytes


@pytest.fixture
def blob(tmp_path):
    path = tmp_path / "block-00000.bin"
    path.write_bytes(DATA)
    return str(path)


@pytest.mark.parametrize(
    ("offset", "size"), [(0, 1), (0, len(DATA)), (3, 5), (1000, 4096), (len(DATA) - 1, 1)]
)
def test_reads_the_exact_range(blob, offset, size):
    assert (
        mdr.read_blob({"path": blob, "offset": offset, "size": size})
        == DATA[offset : offset + size]
    )


def test_file_url_and_extra_keys(blob):
    ref = {"path": f"file://{blob}", "offset": 7, "size": 9, "note": "ignored"}
    assert mdr.read_blob(ref) == DATA[7:16]


def test_one_ranged_request_over_http(tmp_path):
    (tmp_path / "big.bin").write_bytes(DATA)
    with FileServer(tmp_path) as server:
        url = server.url("big.bin")
        assert mdr.read_blob({"path": url, "offset": 1000, "size": 300}) == DATA[1000:1300]
        requests = list(server.state.requests)
    assert [(r.method, r.range, r.status, r.bytes_sent) for r in requests] == [
        ("GET", "bytes=1000-1299", 206, 300)
    ]


def test_past_the_end_over_http_names_the_size(tmp_path):
    (tmp_path / "big.bin").write_bytes(DATA)
    with FileServer(tmp_path) as server:
        url = server.url("big.bin")
        with pytest.raises(EOFError, match=f"has {len(DATA)} bytes"):
            mdr.read_blob({"path": url, "offset": len(DATA) - 10, "size": 11})
        gets = server.state.gets()
    # one ranged read, never the whole object (the size comes from a HEAD)
    assert [r.range for r in gets] == [f"bytes={len(DATA) - 10}-{len(DATA)}"]


@pytest.mark.parametrize(
    ("offset", "size"), [(len(DATA) - 2, 3), (len(DATA), 1), (len(DATA) + 100, 5)]
)
def test_past_the_end_says_how_many_bytes_exist(blob, offset, size):
    with pytest.raises(EOFError, match=rf"the blob has {len(DATA)} bytes") as caught:
        mdr.read_blob({"path": blob, "offset": offset, "size": size})
    assert blob in str(caught.value)


def test_size_zero_is_empty(blob):
    assert mdr.read_blob({"path": blob, "offset": 5, "size": 0}) == b""
    assert mdr.read_blob({"path": blob, "offset": len(DATA), "size": 0}) == b""


def test_missing_blob_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        mdr.read_blob({"path": str(tmp_path / "nope.bin"), "offset": 0, "size": 1})


@pytest.mark.parametrize(
    "ref",
    [
        None,
        "a/path.bin",
        ["p", 0, 1],
        {"offset": 0, "size": 1},
        {"path": "x", "size": 1},
        {"path": "x", "offset": 0},
        {"path": "", "offset": 0, "size": 1},
        {"path": None, "offset": 0, "size": 1},
        {"path": 5, "offset": 0, "size": 1},
        {"path": "x", "offset": -1, "size": 1},
        {"path": "x", "offset": 0, "size": -3},
        {"path": "x", "offset": 1.5, "size": 1},
        {"path": "x", "offset": 0, "size": 2.0},
        {"path": "x", "offset": "0", "size": 1},
        {"path": "x", "offset": True, "size": 1},
        {"path": "x", "offset": 0, "size": None},
    ],
)
def test_malformed_references_raise_value_error(ref):
    with pytest.raises(ValueError):
        mdr.read_blob(ref)
