"""How many asset copies run at once, observed on a slow HTTP server on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

import refiner_core as mdr

from .http_server import FileServer
from .media import blocks, read_rows, write_files

dt = mdr.datatype
DELAY = 0.15


@pytest.fixture
def served(tmp_path):
    contents = {f"clip-{i:02d}.y4m": b"clip %02d " % i * (i + 1) for i in range(24)}
    write_files(tmp_path / "www", contents)
    with FileServer(tmp_path / "www", delay=DELAY) as server:
        yield server, contents


def _pipeline(server, contents, names=None):
    names = names or sorted(contents)
    return mdr.from_items(
        [{"i": i, "video": server.url(n)} for i, n in enumerate(names)],
        dtypes={"video": dt.video_path()},
    )


def test_file_copies_run_up_to_max_in_flight(tmp_path, served):
    server, contents = served
    names = sorted(contents)[:12]
    out = tmp_path / "out"
    summary = (
        _pipeline(server, contents, names)
        .write_parquet(str(out), assets=mdr.FileAssetConfig(max_in_flight=4))
        .launch_local()
        .summary
    )
    assert server.state.max_in_flight == 4
    assert len(server.state.gets()) == 12
    assert summary.counters["assets_written"] == 12
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [Path(r["video"]).read_bytes() for r in rows] == [contents[n] for n in names]
    assert Path(rows[0]["video"]).name == "00000000_clip-00.y4m"


def test_file_copies_overlap_across_blocks(tmp_path, served):
    server, contents = served
    out = tmp_path / "out"
    summary = (
        _pipeline(server, contents)
        .with_max_block_rows(2)
        .write_parquet(str(out), assets=mdr.FileAssetConfig(max_in_flight=6))
        .launch_local()
        .summary
    )
    # blocks hold 2 rows, yet 6 copies ran at once: later blocks started before earlier ended
    assert server.state.max_in_flight == 6
    assert summary.counters["assets_written"] == 24 and summary.counters["rows_written"] == 24
    rows = read_rows(out)
    assert [r["i"] for r in rows] == list(range(24))  # rows still land in order
    assert [Path(r["video"]).read_bytes() for r in rows] == [contents[n] for n in sorted(contents)]


def test_packed_reads_run_up_to_max_in_flight_and_keep_order(tmp_path, served):
    server, contents = served
    out = tmp_path / "out"
    summary = (
        _pipeline(server, contents)
        .write_parquet(str(out), assets=mdr.BlobAssetConfig(max_in_flight=5))
        .launch_local()
        .summary
    )
    assert server.state.max_in_flight == 5
    assert summary.counters["assets_written"] == 24
    (block,) = blocks(out)
    assert block.read_bytes() == b"".join(contents[n] for n in sorted(contents))
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [mdr.read_blob(r["video"]) for r in rows] == [contents[n] for n in sorted(contents)]


@pytest.mark.parametrize(
    "config",
    [
        mdr.FileAssetConfig(missing_policy="set_null"),
        mdr.BlobAssetConfig(missing_policy="set_null"),
    ],
)
def test_a_missing_url_is_a_missing_asset(tmp_path, served, config):
    server, contents = served
    server.state.delay = 0
    names = sorted(contents)[:2]
    urls = [server.url(names[0]), server.url("no-such-clip.y4m"), server.url(names[1])]
    out = tmp_path / "out"
    summary = (
        mdr.from_items(
            [{"i": i, "video": u} for i, u in enumerate(urls)], dtypes={"video": dt.video_path()}
        )
        .write_parquet(str(out), assets=config)
        .launch_local()
        .summary
    )
    assert summary.counters["missing_assets"] == 1 and summary.counters["cells_nulled"] == 1
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert rows[1]["video"] is None
    read = (
        mdr.read_blob
        if isinstance(config, mdr.BlobAssetConfig)
        else (lambda p: Path(p).read_bytes())
    )
    assert [read(rows[0]["video"]), read(rows[2]["video"])] == [contents[n] for n in names]


@pytest.mark.parametrize("size", [1000, 9 * 1024 * 1024], ids=["in-hand", "streamed"])
@pytest.mark.parametrize(
    "config",
    [
        mdr.FileAssetConfig(missing_policy="set_null"),
        mdr.BlobAssetConfig(missing_policy="set_null"),
    ],
    ids=["file", "blob"],
)
def test_a_source_that_fails_half_way_leaves_nothing_visible(tmp_path, config, size):
    www = tmp_path / "www"
    write_files(www, {"good.y4m": b"g" * 100, "cut.y4m": b"c" * size})
    out = tmp_path / "out"
    with FileServer(www) as server:
        server.state.truncated.add("cut.y4m")
        urls = [server.url("good.y4m"), server.url("cut.y4m")]
        with pytest.raises(mdr.StageFailed) as caught:
            mdr.from_items(
                [{"i": i, "video": u} for i, u in enumerate(urls)],
                dtypes={"video": dt.video_path()},
            ).write_parquet(str(out), assets=config).launch_local()
    message = str(caught.value).split("\n\n", 1)[0]
    assert "column 'video', row 1" in message and "cut.y4m" in message
    # not a missing asset: set_null does not hide it, and no block or copy is left behind
    assert not [p for p in out.rglob("*") if p.is_file() and "_refiner" not in p.parts]
