"""Generated media for the asset tests, and readers of what an output folder holds.

Videos are real YUV4MPEG2 (``.y4m``) files: a text header, then ``FRAME`` records of
raw 4:2:0 planes. Any player or ffmpeg opens them, and each file's bytes differ.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ATTEMPT_DIR = re.compile(r"\d{5}__[0-9a-f]{12}\Z")


def y4m_video(seed: int, *, width: int = 16, height: int = 8, frames: int = 3) -> bytes:
    """A small, valid YUV4MPEG2 video whose pixels depend on ``seed``."""
    header = f"YUV4MPEG2 W{width} H{height} F25:1 Ip A1:1 C420jpeg\n".encode()
    luma = width * height
    chroma = (width // 2) * (height // 2)
    out = [header]
    for f in range(frames):
        out.append(b"FRAME\n")
        out.append(bytes((seed * 31 + f * 7 + i) % 256 for i in range(luma)))
        out.append(bytes([(seed + f) % 256]) * chroma)
        out.append(bytes([(seed * 3 + f) % 256]) * chroma)
    return b"".join(out)


def write_videos(folder: Path, count: int, *, prefix: str = "episode", **shape: int) -> list[str]:
    """Write ``count`` videos into ``folder``; returns their absolute paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"{prefix}_{i:03d}.y4m"
        path.write_bytes(y4m_video(i, **shape))
        paths.append(str(path.resolve()))
    return paths


def write_files(folder: Path, contents: dict[str, bytes]) -> dict[str, str]:
    """Write ``{name: bytes}`` into ``folder``; returns ``{name: absolute path}``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, data in contents.items():
        path = folder / name
        path.write_bytes(data)
        paths[name] = str(path.resolve())
    return paths


def summary(output: Path) -> dict[str, Any]:
    return json.loads((Path(output) / "_refiner" / "summary.json").read_text())


def data_files(output: Path, suffix: str = ".parquet") -> list[Path]:
    """Data files at the top of ``output`` (refiner's own and asset folders excluded)."""
    return sorted(p for p in Path(output).glob(f"*{suffix}") if p.is_file())


def read_table(output: Path) -> pa.Table:
    """Every data Parquet file of ``output`` as one table (file order)."""
    tables = [pq.read_table(p) for p in data_files(output)]
    assert tables, f"no Parquet data file in {output}"
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def read_rows(output: Path) -> list[dict[str, Any]]:
    return read_table(output).to_pylist()


def read_jsonl_rows(output: Path) -> list[dict[str, Any]]:
    rows = []
    for path in data_files(output, ".jsonl"):
        rows.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return rows


def attempt_dirs(output: Path, subdir: str = "assets") -> list[Path]:
    base = Path(output) / subdir
    if not base.exists():
        return []
    return sorted(p for p in base.iterdir() if ATTEMPT_DIR.match(p.name))


def relative_files(output: Path, under: str = "") -> list[str]:
    """Every file below ``output/under`` (hidden ones included), relative to ``output``."""
    base = Path(output) / under
    return sorted(str(p.relative_to(output)) for p in base.rglob("*") if p.is_file())


def blocks(output: Path, subdir: str = "assets") -> list[Path]:
    """Every block file below ``output/subdir``, in name order."""
    return sorted((Path(output) / subdir).rglob("block-*.bin"))


def launch(sequence: Any, **options: Any) -> dict[str, Any]:
    """Run ``sequence`` and return its finalization summary."""
    return sequence.launch_local(**options).summary
