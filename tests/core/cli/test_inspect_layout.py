"""``refiner inspect`` piped or redirected prints every header, name and number whole."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import refiner_core as mdr
from refiner_core.cli.counters import counters_of
from refiner_core.cli.inspection import human_bytes, render_inspection
from refiner_core.cli.storage import open_output

REFINER = Path(sys.executable).parent / "refiner"
LONG_COLUMN = "left_wrist_camera_rgb_frame_captured_at_thirty_hertz_during_teleoperation"
HEADERS = [
    "column",
    "kind",
    "form",
    "blocks",
    "bytes",
    "smallest",
    "median",
    "largest",
    "blocks per 10 % of fill",
    "file",
    "size",
    "fill",
    "counter",
    "value",
    "meaning",
]


@pytest.fixture(scope="module")
def wide_output(tmp_path_factory) -> Path:
    """Thousands of rows referencing real files under a long column name: counters in
    the millions, block sizes in MiB."""
    root = tmp_path_factory.mktemp("wide")
    sources = []
    for i in range(4):
        path = root / "src" / f"frame_{i}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(bytes([i]) * (1500 + 100 * i))
        sources.append(str(path))
    rows = [{"episode_index": i, LONG_COLUMN: sources[i % 4]} for i in range(2500)]
    out = root / "out"
    mdr.from_items(
        rows, items_per_shard=1250, dtypes={LONG_COLUMN: mdr.datatype.image_path()}
    ).write_parquet(str(out), assets=mdr.BlobAssetConfig(target_bytes=1 << 20)).launch_local()
    return out


def _inspect(out: Path, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run(
        [str(REFINER), "inspect", "--all", str(out)],
        capture_output=True,  # stdout is a pipe, not a terminal
        text=True,
        timeout=120,
        env={**environment, **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("columns", [None, "60"], ids=["no-COLUMNS", "COLUMNS=60"])
def test_piped_inspect_cuts_no_header_name_or_number(wide_output: Path, columns) -> None:
    text = _inspect(wide_output, **({"COLUMNS": columns} if columns else {}))
    assert "…" not in text  # nothing was ellipsized
    for header in HEADERS:
        assert f" {header} " in text, header
    assert text.count(LONG_COLUMN) >= 2  # the asset columns and blocks tables

    summary = json.loads((wide_output / "_refiner" / "summary.json").read_text())
    assert summary["rows_written"] == 2500
    assert f" {summary['rows_written']:,} " in text
    counters = counters_of(summary)
    assert counters["block_bytes"] > 1_000_000
    for name, value in counters.items():
        assert f" {name} " in text, name
        assert f" {value:,} " in text, (name, value)

    blocks = sorted((wide_output / "assets" / "").rglob("*"))
    blocks = [p for p in blocks if p.is_file()]
    assert blocks
    for block in blocks:
        assert f" {human_bytes(block.stat().st_size)} " in text
        assert f"/{LONG_COLUMN}/{block.name} " in text


def test_piped_inspect_without_columns_does_not_wrap_meanings(wide_output: Path) -> None:
    text = _inspect(wide_output)
    assert "references rewritten into a blob that was copied whole" in text
    assert str(wide_output / "_refiner" / "summary.json") in text


def test_narrow_terminal_wraps_prose_but_cuts_nothing(wide_output: Path) -> None:
    console = Console(file=io.StringIO(), width=50, force_terminal=True, color_system=None)
    render_inspection(open_output(str(wide_output)), console)
    text = console.file.getvalue()
    assert "…" not in text
    summary = json.loads((wide_output / "_refiner" / "summary.json").read_text())
    for name, value in counters_of(summary).items():
        assert f" {name} " in text and f" {value:,} " in text, name
    # the meanings column took the width that was left, wrapping at words
    assert "references rewritten into a blob that was copied whole" not in text
    counters = text[text.index("Counters (summary)") : text.index("Where the files are")]
    widest = max(len(line) for line in counters.splitlines())
    assert widest < len(" references_coalesced  ") + 50
    assert console.width == 50
