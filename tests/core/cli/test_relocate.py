"""The README's way to move a dataset: write it again at the new place from its references."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import refiner_core as mdr

from .test_refiner_command import REFINER, images


def test_relocated_dataset_needs_nothing_of_the_old_place(tmp_path: Path) -> None:
    paths = images(tmp_path / "src", 6)
    old, new = tmp_path / "old" / "out", tmp_path / "new" / "out"
    source = mdr.from_items(
        [{"i": i, "image": p} for i, p in enumerate(paths)],
        items_per_shard=3,
        dtypes={"image": mdr.datatype.image_path()},
    )
    source.write_parquet(str(old), assets=mdr.BlobAssetConfig()).launch_local()

    stats = (
        mdr.read_parquet(str(old))
        .write_parquet(str(new), assets=mdr.BlobAssetConfig())
        .launch_local()
    )
    assert stats.summary.counters["blobs_coalesced"] == 2  # each old block copied whole, once
    shutil.rmtree(tmp_path / "old")
    shutil.rmtree(tmp_path / "src")

    rows = sorted(mdr.read_parquet(str(new)).materialize(), key=lambda r: r["i"])
    assert all(r["image"]["path"].startswith(str(new)) for r in rows)
    assert [mdr.read_blob(r["image"])[:8] for r in rows] == [b"\x89PNG\r\n\x1a\n"] * 6
    done = subprocess.run([str(REFINER), "verify", str(new)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
