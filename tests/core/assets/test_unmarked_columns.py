"""An asset config with no asset column warns once, naming the columns that look like media."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa

from refiner_core.sinks.assets.unmarked import media_path_columns

RUN = """
import sys, refiner_core as mdr
src, out, mode, marked = sys.argv[1:5]
rows = [{{"episode": i, "video": f"{{src}}/clip.mp4", "frames": [f"{{src}}/f.png"], "task": "pick"}}
        for i in range(8)]
dtypes = {{"video": mdr.datatype.video_path()}} if marked == "yes" else None
assets = mdr.BlobAssetConfig() if mode == "blobs" else mdr.FileAssetConfig()
stats = mdr.from_items(rows, items_per_shard=2, dtypes=dtypes).write_parquet(out, assets=assets)
stats = stats.launch_local(num_workers=1)
print("assets_written", stats.summary.counters["assets_written"])
"""


def run(tmp_path: Path, mode: str, marked: str) -> subprocess.CompletedProcess:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "clip.mp4").write_bytes(b"mp4")
    (src / "f.png").write_bytes(b"png")
    return subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(RUN.format()),
            str(src),
            str(tmp_path / f"out-{mode}-{marked}"),
            mode,
            marked,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_columns_that_look_like_media_paths() -> None:
    table = pa.table(
        {
            "clip": ["s3://b/1.MP4", "s3://b/2.mp4?v=1", None],
            "frames": [["a.png", "b.jpg"], [], None],
            "task": ["pick", "place", "pick"],
            "mixed": ["a.png", "readme", "notes"],
            "n": [1, 2, 3],
        }
    )
    assert media_path_columns(table) == {
        "clip": "mdr.datatype.video_path()",
        "frames": "mdr.datatype.list_(mdr.datatype.image_path())",
    }


def test_blob_config_without_marks_warns_once_with_the_dtypes(tmp_path: Path) -> None:
    done = run(tmp_path, "blobs", "no")
    assert done.returncode == 0, done.stderr
    assert "assets_written 0" in done.stdout  # nothing packed: that is what the warning says
    assert done.stderr.count("UnmarkedAssetsWarning") == 1  # four shards, one warning
    assert "assets=mdr.BlobAssetConfig(...) found no asset column" in done.stderr
    assert (
        'dtypes={"video": mdr.datatype.video_path(), '
        '"frames": mdr.datatype.list_(mdr.datatype.image_path())}' in done.stderr
    )
    assert "task" not in done.stderr.split("look like media paths")[0]


def test_file_config_without_marks_warns_too(tmp_path: Path) -> None:
    done = run(tmp_path, "files", "no")
    assert done.returncode == 0, done.stderr
    assert "assets=mdr.FileAssetConfig(...) found no asset column" in done.stderr


def test_marked_columns_do_not_warn(tmp_path: Path) -> None:
    done = run(tmp_path, "blobs", "yes")
    assert done.returncode == 0, done.stderr
    assert "assets_written 8" in done.stdout
    assert "UnmarkedAssetsWarning" not in done.stderr
