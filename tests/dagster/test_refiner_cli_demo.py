"""The ``refiner`` command on the demo's outputs; its preview page rendered by headless Chromium."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq

import refiner_core as mdr
from tests.dagster.test_demo_cli import BIN, DemoHome, demo_home  # noqa: F401
from tests.dagster.test_webserver_ui import chromium, keep_artifact, page_text

FINALIZED = ("episode_dataset", "episode_dataset_repacked", "episodes_with_gap")


def refiner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "refiner"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": str(BIN)},
    )


def dataset(demo: DemoHome, name: str) -> Path:
    return demo.home / "storage" / "refiner" / name


def test_inspect_a_dagster_dataset_folder(demo_home: DemoHome) -> None:  # noqa: F811
    done = refiner("inspect", str(dataset(demo_home, "episode_dataset_repacked")))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    meta = demo_home.metadata("episode_dataset_repacked_finalized")
    assert meta["dagster/uri"] in text
    assert re.search(r"│ state\s+│ published \(Dagster dataset version\)", text)
    assert re.search(r"│ published version\s+│ this one", text)
    assert re.search(
        rf"│ blobs_coalesced\s+│\s+{meta['blobs_coalesced']} │ source blobs copied whole", text
    )
    assert re.search(r"│ thumbnail\s+│ image\s+│ blob\s+│ no", text)
    assert re.search(r"│ frames\s+│ image\s+│ blob\s+│ yes", text)
    assert "_current.json" in text and "_versions/" in text


def test_verify_the_demo_outputs_then_a_truncated_block(demo_home: DemoHome) -> None:  # noqa: F811
    for name in FINALIZED:
        done = refiner("verify", str(dataset(demo_home, name)))
        assert done.returncode == 0, (name, done.stderr)
        assert "OK: 24 rows" in done.stdout
    # The dataset with the missing frame: its null cell is no reference, so it verifies.
    uri = demo_home.metadata("episode_dataset_finalized")["dagster/uri"]
    # the first table file in the summary's order holds the dataset's first rows
    table_file = sorted(Path(uri).glob("*.parquet"))[0]
    thumbnails = pq.read_table(table_file).column("thumbnail").to_pylist()
    row = 1
    ref = thumbnails[row]
    block = Path(ref["path"])
    original = block.read_bytes()
    block.write_bytes(original[: ref["offset"]])
    try:
        done = refiner("verify", uri)
    finally:
        block.write_bytes(original)
    assert done.returncode == 1
    broken = [
        i
        for i, t in enumerate(thumbnails)
        if t["path"] == ref["path"] and t["offset"] >= ref["offset"]
    ]
    assert f"FAILED: {len(broken)} problem(s)" in done.stderr
    assert (
        f"row {row} ({table_file.name}, row {row} of that file), column thumbnail: {block}"
        in done.stderr
    )
    assert f"reaches past the end of the block, which has {ref['offset']} bytes" in done.stderr


def test_preview_page_in_headless_chromium(demo_home: DemoHome, tmp_path: Path) -> None:  # noqa: F811
    page = tmp_path / "report.html"
    done = refiner(
        "preview", str(dataset(demo_home, "episode_dataset_repacked")), "--html", str(page)
    )
    assert done.returncode == 0, done.stderr
    assert "(24 images)" in done.stdout

    dumped = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "profile")
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    # Every embedded image was decoded by the browser (the page counts them on load).
    assert 'data-images-decoded="24"' in dumped.stdout
    text = page_text(dumped.stdout)
    assert "Contact sheet" in text and "24 sampled image asset(s)" in text
    uri = demo_home.metadata("episode_dataset_repacked_finalized")["dagster/uri"]
    repacked = mdr.read_parquet(uri).materialize()
    blocks = {r["thumbnail"]["path"] for r in repacked}
    assert "Block fill" in text and f"thumbnail: {len(blocks)} block(s)" in text
    assert "blobs_coalesced" in text and "source blobs copied whole" in text

    shot = tmp_path / "refiner_preview.png"
    taken = chromium(f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "profile")
    assert taken.returncode == 0, taken.stderr[-3000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    keep_artifact(shot)
