"""Missing-asset policies (error, set_null, drop_row) and the errors no policy hides."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.datatype import FORM_KEY, KIND_KEY

from .media import attempt_dirs, blocks, data_files, read_rows, relative_files, write_files

dt = mdr.datatype


def policy_counts(summary: dict) -> tuple[int, int, int]:
    """(missing assets, cells set to null, rows dropped) of a write's summary."""
    return (
        summary.counters["missing_assets"],
        summary.counters["cells_nulled"],
        summary.counters["rows_dropped"],
    )


CONFIGS = {
    "file": lambda policy: mdr.FileAssetConfig(missing_policy=policy),
    "blob": lambda policy: mdr.BlobAssetConfig(missing_policy=policy),
}


def _read(config_name, value):
    if value is None:
        return None
    return mdr.read_blob(value) if config_name == "blob" else Path(value).read_bytes()


def _first_line(exc: BaseException) -> str:
    return str(exc).split("\n\n", 1)[0]


@pytest.fixture
def media(tmp_path):
    files = write_files(tmp_path / "src", {f"{i}.y4m": f"video-{i}".encode() for i in range(5)})
    missing = [str(tmp_path / "src" / f"gone-{i}.y4m") for i in range(3)]
    return files, missing


def _scalar_rows(files, missing):
    return [
        {"i": 0, "video": files["0.y4m"]},
        {"i": 1, "video": missing[0]},
        {"i": 2, "video": files["2.y4m"]},
        {"i": 3, "video": missing[1]},
        {"i": 4, "video": None},
    ]


def _list_rows(files, missing):
    return [
        {"i": 0, "frames": [files["0.y4m"], files["1.y4m"]]},
        {"i": 1, "frames": [files["2.y4m"], missing[0]]},
        {"i": 2, "frames": [missing[1]]},
        {"i": 3, "frames": [None, files["3.y4m"]]},
    ]


def _write(tmp_path, rows, dtypes, config):
    out = tmp_path / "out"
    stats = (
        mdr.from_items(rows, dtypes=dtypes)
        .write_parquet(str(out), assets=config)
        .launch_local(num_workers=1)
    )
    return out, stats.summary


# scalar cells ---------------------------------------------------------------------


@pytest.mark.parametrize("config_name", CONFIGS)
def test_error_names_row_column_and_path(tmp_path, media, config_name):
    files, missing = media
    with pytest.raises(mdr.StageFailed) as caught:
        _write(
            tmp_path,
            _scalar_rows(files, missing),
            {"video": dt.video_path()},
            CONFIGS[config_name]("error"),
        )
    message = _first_line(caught.value)
    assert "column 'video'" in message
    assert "row 1" in message
    assert missing[0] in message
    assert "missing_policy" in message
    out = tmp_path / "out"
    # the failed attempt left nothing visible
    assert data_files(out) == []
    assert attempt_dirs(out) == []
    assert not (out / "assets").exists() or relative_files(out, "assets") == []


@pytest.mark.parametrize("config_name", CONFIGS)
def test_set_null_keeps_rows_and_nulls_cells(tmp_path, media, config_name):
    files, missing = media
    out, summary = _write(
        tmp_path,
        _scalar_rows(files, missing),
        {"video": dt.video_path()},
        CONFIGS[config_name]("set_null"),
    )
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [r["i"] for r in rows] == [0, 1, 2, 3, 4]
    assert [_read(config_name, r["video"]) for r in rows] == [
        b"video-0",
        None,
        b"video-2",
        None,
        None,
    ]
    assert policy_counts(summary) == (2, 2, 0)
    assert summary.counters["assets_written"] == 2
    assert summary.counters["rows_written"] == 5


@pytest.mark.parametrize("config_name", CONFIGS)
def test_drop_row_removes_rows(tmp_path, media, config_name):
    files, missing = media
    out, summary = _write(
        tmp_path,
        _scalar_rows(files, missing),
        {"video": dt.video_path()},
        CONFIGS[config_name]("drop_row"),
    )
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [r["i"] for r in rows] == [0, 2, 4]
    assert [_read(config_name, r["video"]) for r in rows] == [b"video-0", b"video-2", None]
    assert policy_counts(summary) == (2, 0, 2)
    assert summary.counters["rows_written"] == 3
    assert summary.counters["assets_written"] == 2


# list cells -----------------------------------------------------------------------


@pytest.mark.parametrize("config_name", CONFIGS)
def test_error_in_a_list_names_the_element(tmp_path, media, config_name):
    files, missing = media
    with pytest.raises(mdr.StageFailed) as caught:
        _write(
            tmp_path,
            _list_rows(files, missing),
            {"frames": dt.list_(dt.image_path())},
            CONFIGS[config_name]("error"),
        )
    message = _first_line(caught.value)
    assert "column 'frames', row 1 element 1" in message
    assert missing[0] in message
    assert data_files(tmp_path / "out") == []
    assert attempt_dirs(tmp_path / "out") == []


@pytest.mark.parametrize("config_name", CONFIGS)
def test_set_null_nulls_list_elements(tmp_path, media, config_name):
    files, missing = media
    out, summary = _write(
        tmp_path,
        _list_rows(files, missing),
        {"frames": dt.list_(dt.image_path())},
        CONFIGS[config_name]("set_null"),
    )
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [[_read(config_name, v) for v in r["frames"]] for r in rows] == [
        [b"video-0", b"video-1"],
        [b"video-2", None],
        [None],
        [None, b"video-3"],
    ]
    assert policy_counts(summary) == (2, 2, 0)
    assert summary.counters["assets_written"] == 4


@pytest.mark.parametrize("config_name", CONFIGS)
def test_drop_row_drops_rows_with_a_missing_element(tmp_path, media, config_name):
    files, missing = media
    out, summary = _write(
        tmp_path,
        _list_rows(files, missing),
        {"frames": dt.list_(dt.image_path())},
        CONFIGS[config_name]("drop_row"),
    )
    rows = sorted(read_rows(out), key=lambda r: r["i"])
    assert [r["i"] for r in rows] == [0, 3]
    assert [[_read(config_name, v) for v in r["frames"]] for r in rows] == [
        [b"video-0", b"video-1"],
        [None, b"video-3"],
    ]
    assert policy_counts(summary) == (2, 0, 2)
    if config_name == "file":
        # the copy already made for row 1's first element is gone with its row
        (attempt,) = attempt_dirs(out)
        assert sorted(p.name for p in (attempt / "frames" / "00000").iterdir()) == [
            "00000000-0000_0.y4m",
            "00000000-0001_1.y4m",
            "00000003-0001_3.y4m",
        ]
    # file mode deletes the dropped row's copy; a block keeps the bytes already appended
    # (unreferenced), so they still count as written there
    written = {"file": 3, "blob": 4}[config_name]
    assert summary.counters["assets_written"] == written
    assert summary.counters["asset_bytes"] == written * len(b"video-0")


def test_drop_row_in_a_later_column_removes_earlier_copies(tmp_path, media):
    """A row dropped because of its second asset column leaves no file of its first."""
    files, missing = media
    rows = [
        {"i": 0, "video": files["0.y4m"], "thumb": files["1.y4m"]},
        {"i": 1, "video": files["2.y4m"], "thumb": missing[0]},
        {"i": 2, "video": files["3.y4m"], "thumb": files["4.y4m"]},
    ]
    out, summary = _write(
        tmp_path,
        rows,
        {"video": dt.video_path(), "thumb": dt.image_path()},
        mdr.FileAssetConfig(missing_policy="drop_row"),
    )
    assert sorted(r["i"] for r in read_rows(out)) == [0, 2]
    (attempt,) = attempt_dirs(out)
    assert sorted(str(p.relative_to(attempt)) for p in attempt.rglob("*") if p.is_file()) == [
        "thumb/00000/00000000_1.y4m",
        "thumb/00000/00000002_4.y4m",
        "video/00000/00000000_0.y4m",
        "video/00000/00000002_3.y4m",
    ]
    assert summary.counters["assets_written"] == 4
    assert summary.counters["asset_bytes"] == 4 * len(b"video-0")
    assert summary.counters["rows_dropped"] == 1


@pytest.mark.parametrize("config_name", CONFIGS)
@pytest.mark.parametrize("policy", ["set_null", "drop_row"])
def test_missing_blob_source_follows_the_policy(tmp_path, config_name, policy):
    block = tmp_path / "block.bin"
    block.write_bytes(b"0123456789")
    rows = [
        {"i": 0, "image": {"path": str(block), "offset": 2, "size": 3}},
        {"i": 1, "image": {"path": str(tmp_path / "gone.bin"), "offset": 0, "size": 4}},
    ]
    out, summary = _write(
        tmp_path, rows, {"image": dt.blob_reference("image")}, CONFIGS[config_name](policy)
    )
    written = sorted(read_rows(out), key=lambda r: r["i"])
    assert _read(config_name, written[0]["image"]) == b"234"
    if policy == "set_null":
        assert written[1]["image"] is None and summary.counters["cells_nulled"] == 1
    else:
        assert len(written) == 1 and summary.counters["rows_dropped"] == 1
    assert summary.counters["missing_assets"] == 1


# errors that every policy reports -------------------------------------------------


def _marked_parquet(path: Path, column: pa.Array, form: bytes) -> str:
    """A Parquet file whose ``video`` column carries an asset mark, whatever its type."""
    field = pa.field("video", column.type, metadata={KIND_KEY: b"video", FORM_KEY: form})
    table = pa.table({"i": pa.array(range(len(column)), pa.int64())}).append_column(field, column)
    pq.write_table(table, path)
    return str(path)


def _broken_inputs(tmp_path: Path) -> dict[str, tuple[mdr.Pipeline, str]]:
    good = tmp_path / "good.y4m"
    good.write_bytes(b"good")
    folder = tmp_path / "a-folder.y4m"
    folder.mkdir()
    block = tmp_path / "block.bin"
    block.write_bytes(b"0123456789")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    return {
        "int in a path column": (
            mdr.read_parquet(
                _marked_parquet(inputs / "ints.parquet", pa.array([5, 6], pa.int64()), b"path")
            ),
            "expected a non-empty path string, got 5",
        ),
        "empty path": (
            mdr.from_items(
                [{"i": 0, "video": str(good)}, {"i": 1, "video": ""}],
                dtypes={"video": dt.video_path()},
            ),
            "expected a non-empty path string",
        ),
        "folder as a path": (
            mdr.from_items(
                [{"i": 0, "video": str(good)}, {"i": 1, "video": str(folder)}],
                dtypes={"video": dt.video_path()},
            ),
            str(folder),
        ),
        "reference without a path": (
            mdr.from_items(
                [
                    {"i": 0, "video": {"path": str(block), "offset": 0, "size": 2}},
                    {"i": 1, "video": {"path": "", "offset": 0, "size": 2}},
                ],
                dtypes={"video": dt.blob_reference("video")},
            ),
            "blob reference path must be a non-empty string",
        ),
        "reference past the end": (
            mdr.from_items(
                [
                    {"i": 0, "video": {"path": str(block), "offset": 0, "size": 2}},
                    {"i": 1, "video": {"path": str(block), "offset": 8, "size": 5}},
                ],
                dtypes={"video": dt.blob_reference("video")},
            ),
            "the blob has 10 bytes",
        ),
    }


CASES = [
    "int in a path column",
    "empty path",
    "folder as a path",
    "reference without a path",
    "reference past the end",
]


@pytest.mark.parametrize("config_name", CONFIGS)
@pytest.mark.parametrize("policy", ["set_null", "drop_row"])
@pytest.mark.parametrize("case", CASES)
def test_other_errors_fail_under_every_policy(tmp_path, config_name, policy, case):
    pipeline, expected = _broken_inputs(tmp_path)[case]
    out = tmp_path / "out"
    with pytest.raises(mdr.StageFailed) as caught:
        pipeline.write_parquet(str(out), assets=CONFIGS[config_name](policy)).launch_local()
    message = _first_line(caught.value)
    # an int column has no good first row; the other cases fail on row 1
    row = 0 if case == "int in a path column" else 1
    assert f"column 'video', row {row}" in message
    assert expected in message
    assert data_files(out) == []
    assert attempt_dirs(out) == []


def test_blob_drop_row_keeps_blocks_readable(tmp_path, media):
    """Bytes already appended for a dropped row stay in the block; kept rows read back."""
    files, missing = media
    out, summary = _write(
        tmp_path,
        _list_rows(files, missing),
        {"frames": dt.list_(dt.image_path())},
        mdr.BlobAssetConfig(missing_policy="drop_row"),
    )
    (block,) = blocks(out)
    assert block.read_bytes() == b"video-0video-1video-2video-3"
    assert summary.counters["block_bytes"] == len(block.read_bytes())
