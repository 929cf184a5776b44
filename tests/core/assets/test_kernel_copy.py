"""Local files packed by the kernel (``copy_file_range``, then ``sendfile``, then
``pread``/``pwrite``), mixed with bytes that pass through Python in the same block."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pyarrow as pa
import pytest

import refiner_core as mdr
from refiner_core.io import kernel_copy
from refiner_core.io.datafile import DataFolder
from refiner_core.sinks.assets.base import MissingAssetError
from refiner_core.sinks.assets.blob_writer import BlobAssetWriter

from .http_server import FileServer
from .media import read_rows, write_files

dt = mdr.datatype

PATHS = ["copy_file_range", "sendfile", "pread"]


@pytest.fixture(params=PATHS)
def copy_path(request, monkeypatch):
    """Which way ``copy_range`` copies: the kernel's ways are switched off one by one,
    as on kernels and filesystems that refuse them."""
    if request.param != "copy_file_range":
        monkeypatch.setattr(kernel_copy, "_copy_file_range_works", False)
    if request.param == "pread":
        monkeypatch.setattr(kernel_copy, "_sendfile_works", False)
    return request.param


def _fds(tmp_path: Path, data: bytes) -> tuple[int, int]:
    (tmp_path / "src").write_bytes(data)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT)
    return src, dst


def test_copy_range_copies_the_range_and_moves_no_position(tmp_path, copy_path):
    data = os.urandom(300_000)
    src, dst = _fds(tmp_path, data)
    try:
        os.write(dst, b"head")
        copy_range = kernel_copy.copy_range
        copy_range(src, 1000, dst, 4, 200_000)
        copy_range(src, 0, dst, 200_004, 10)
        assert os.lseek(src, 0, os.SEEK_CUR) == 0
        assert os.lseek(dst, 0, os.SEEK_CUR) == 4
    finally:
        os.close(src)
        os.close(dst)
    assert (tmp_path / "dst").read_bytes() == b"head" + data[1000:201_000] + data[:10]


def test_copy_range_of_a_short_source_is_an_eof_error(tmp_path, copy_path):
    src, dst = _fds(tmp_path, b"x" * 100)
    try:
        with pytest.raises(EOFError, match="ended 50 bytes early"):
            kernel_copy.copy_range(src, 0, dst, 0, 150)
    finally:
        os.close(src)
        os.close(dst)


def test_local_and_remote_sources_share_one_block(tmp_path, copy_path):
    """Local files (kernel copies) and URLs (bytes written by Python) alternate in one
    column; every reference reads back its own bytes, from one block."""
    local = {f"local-{i:02d}.bin": os.urandom(1000 + 37 * i) for i in range(20)}
    remote = {f"remote-{i:02d}.bin": os.urandom(500 + 53 * i) for i in range(20)}
    local_paths = write_files(tmp_path / "disk", local)
    write_files(tmp_path / "www", remote)
    with FileServer(tmp_path / "www") as server:
        items, expected = [], []
        for i in range(20):
            items.append({"video": local_paths[f"local-{i:02d}.bin"]})
            expected.append(local[f"local-{i:02d}.bin"])
            items.append({"video": server.url(f"remote-{i:02d}.bin")})
            expected.append(remote[f"remote-{i:02d}.bin"])
        out = tmp_path / "out"
        mdr.from_items(
            items, items_per_shard=len(items), dtypes={"video": dt.video_path()}
        ).write_parquet(str(out), assets=mdr.BlobAssetConfig()).launch_local(num_workers=1)
    rows = read_rows(out)
    assert len({row["video"]["path"] for row in rows}) == 1
    assert [mdr.read_blob(row["video"]) for row in rows] == expected


def _writer(out: Path) -> BlobAssetWriter:
    return BlobAssetWriter(mdr.BlobAssetConfig(), DataFolder(str(out)), "000000000000")


def _table(paths: list[str]) -> pa.Table:
    field = dt.video_path().to_field("video")
    return pa.table({"video": pa.array(paths, pa.string())}).cast(pa.schema([field]))


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_no_source_stays_open_after_a_column_fails_half_way(tmp_path):
    """A missing file at row 30 fails the column while up to ``max_in_flight`` later
    files are already open for their copies; every one of them is closed."""
    paths = list(write_files(tmp_path / "src", {f"{i:03d}.bin": b"%03d" % i for i in range(60)}))
    paths = [str(tmp_path / "src" / name) for name in paths]
    paths[30] = str(tmp_path / "src" / "gone.bin")
    before = _open_fds()

    async def run() -> None:
        writer = _writer(tmp_path / "out")
        try:
            await writer.process(_table(paths), shard_id="00000", first_row=0)
        finally:
            await writer.abort()

    with pytest.raises(MissingAssetError, match="row 30"):
        asyncio.run(run())
    assert _open_fds() == before


def test_no_source_stays_open_after_a_column_is_packed(tmp_path):
    names = write_files(tmp_path / "src", {f"{i:03d}.bin": b"%03d" % i for i in range(60)})
    before = _open_fds()

    async def run() -> pa.Table:
        writer = _writer(tmp_path / "out")
        tables = await writer.process(_table(list(names.values())), shard_id="00000", first_row=0)
        await writer.close()
        return tables[0]

    table = asyncio.run(run())
    assert _open_fds() == before
    references = table.column("video").to_pylist()
    blocks = {ref["path"] for ref in references}
    assert len(blocks) == 1 and os.path.exists(blocks.pop())
    assert [mdr.read_blob(ref) for ref in references] == [b"%03d" % i for i in range(60)]


def test_copy_file_of_a_known_size_uses_no_fstat_and_fails_on_a_shrunk_source(
    tmp_path, monkeypatch
):
    """A caller that has just stat'ed the source passes its size; a source that shrank
    since then is an ``EOFError``, never a short copy."""
    (tmp_path / "src").write_bytes(b"x" * 1000)

    def no_fstat(fd):
        raise AssertionError("fstat called although the size was given")

    with monkeypatch.context() as patched:
        patched.setattr(kernel_copy.os, "fstat", no_fstat)
        assert kernel_copy.copy_file(str(tmp_path / "src"), str(tmp_path / "a"), 1000) == 1000
    assert (tmp_path / "a").read_bytes() == b"x" * 1000
    with pytest.raises(EOFError, match="ended 500 bytes early"):
        kernel_copy.copy_file(str(tmp_path / "src"), str(tmp_path / "b"), 1500)


@pytest.mark.parametrize("config", ["FileAssetConfig", "BlobAssetConfig"])
def test_local_sources_are_stat_ed_once_and_never_fstat_ed(tmp_path, monkeypatch, config):
    """A local source is judged with one ``stat`` and copied (to a file of its own, or
    into a block) with the size that ``stat`` gave: no ``fstat`` and no second path
    check per file."""
    from refiner_core.sinks.assets import make_asset_writer

    names = write_files(tmp_path / "src", {f"{i:03d}.bin": b"%03d" % i * 100 for i in range(150)})
    paths = list(names.values())
    stats: list[str] = []
    real_stat = os.stat

    def counted_stat(path, *args, **kwargs):
        if str(path).startswith(str(tmp_path / "src")):
            stats.append(str(path))
        return real_stat(path, *args, **kwargs)

    real_fstat = os.fstat
    fstats: list[str] = []

    def counted_fstat(fd):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(tmp_path / "src")):
                fstats.append(target)
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", counted_fstat)
    monkeypatch.setattr("refiner_core.io.source_policy.os.stat", counted_stat)

    async def run() -> pa.Table:
        cfg = getattr(mdr, config)()
        writer = make_asset_writer(cfg, DataFolder(str(tmp_path / "out")), "a0")
        tables = await writer.process(_table(paths), shard_id="00000", first_row=0)
        await writer.close()
        return tables[0]

    table = asyncio.run(run())
    assert sorted(stats) == sorted(paths) and fstats == []
    cells = table.column("video").to_pylist()
    if config == "FileAssetConfig":
        assert [Path(c).read_bytes() for c in cells] == [b"%03d" % i * 100 for i in range(150)]
        assert [Path(c).parent.name for c in cells] == ["00000"] * 150
    else:
        assert [mdr.read_blob(c) for c in cells] == [b"%03d" % i * 100 for i in range(150)]


def test_a_source_that_shrinks_after_its_stat_fails_the_pack_and_leaves_no_block(
    tmp_path, monkeypatch
):
    """Packing trusts the size of the policy's ``stat``; a file that is shorter when it
    is copied fails its row with ``EOFError`` naming the file, and the aborted attempt
    leaves no block behind."""
    from refiner_core.sinks.assets.sources import SourcePolicy

    names = write_files(tmp_path / "src", {f"{i}.bin": b"x" * 1000 for i in range(3)})
    paths = list(names.values())
    real_check = SourcePolicy.check_local_file

    def stale_size(self, value):
        path, size = real_check(self, value)
        return path, size + 24 if path == paths[1] else size

    monkeypatch.setattr(SourcePolicy, "check_local_file", stale_size)

    async def run() -> None:
        writer = _writer(tmp_path / "out")
        try:
            await writer.process(_table(paths), shard_id="00000", first_row=0)
        except BaseException:
            await writer.abort()
            raise

    with pytest.raises(Exception, match="row 1") as caught:
        asyncio.run(run())
    assert paths[1] in str(caught.value) and "ended 24 bytes early" in str(caught.value)
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


@pytest.mark.parametrize("checksum", [None, "crc32c"])
@pytest.mark.parametrize("policy", ["set_null", "drop_row"])
def test_a_column_of_local_paths_packs_as_the_general_loop_does(tmp_path, policy, checksum):
    """A column of local paths takes the short loop (no dedupe, local output, with or
    without a checksum); its rows, bytes, checksums and counters are those of the
    general loop, which ``dedupe="source"`` takes, on the same unique files with
    missing ones among them, in a scalar column and a list column."""
    names = write_files(
        tmp_path / "src", {f"{i:02d}.bin": b"%02d" % i * (i + 1) for i in range(40)}
    )
    paths = list(names.values())
    gone = str(tmp_path / "src" / "gone.bin")
    rows = [
        {
            "i": i,
            "video": gone if i % 7 == 3 else paths[i],
            "frames": [paths[(i + 1) % 40], gone if i % 11 == 5 else paths[(i + 2) % 40]],
        }
        for i in range(0, 36, 3)  # every file at most once: dedupe="source" reuses none
    ]

    def run(name: str, dedupe: str | None) -> tuple[list[dict], dict]:
        out = tmp_path / name
        result = (
            mdr.from_items(
                rows, dtypes={"video": dt.video_path(), "frames": dt.list_(dt.image_path())}
            )
            .write_parquet(
                str(out),
                assets=mdr.BlobAssetConfig(missing_policy=policy, dedupe=dedupe, checksum=checksum),
            )
            .launch_local(rundir=str(tmp_path / f"run-{name}"))
        )
        got = sorted(read_rows(out), key=lambda r: r["i"])
        for row in got:
            row["video"] = _bytes_and_checksum(row["video"])
            row["frames"] = [_bytes_and_checksum(f) for f in row["frames"] or []]
        return got, result.summary

    short, short_summary = run("short", None)
    general, general_summary = run("general", "source")
    assert short == general
    for counter in (
        "assets_written",
        "asset_bytes",
        "missing_assets",
        "cells_nulled",
        "rows_dropped",
    ):
        assert short_summary.counters.get(counter) == general_summary.counters.get(counter), counter
    expected_missing = sum(r["video"] == gone for r in rows) + sum(
        gone in r["frames"] for r in rows
    )
    assert short_summary.counters["missing_assets"] == expected_missing > 0
    cells = [row["video"] for row in short] + [f for row in short for f in row["frames"]]
    assert all(cell is None or cell[0] for cell in cells)
    assert all(cell is None or (cell[1] is not None) == (checksum is not None) for cell in cells)


def _bytes_and_checksum(reference: dict | None) -> tuple[bytes, str | None] | None:
    if reference is None:
        return None
    return mdr.read_blob(reference), reference.get("checksum")
