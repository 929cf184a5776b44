"""The demo's synthetic robotics dataset: episodes with real PNG frames.

:func:`ensure_demo_data` writes, once, under :func:`demo_data_dir`::

    <demo data dir>/
      episodes/v1/episodes.parquet         the source table (one row per episode)
      episodes/v1/images/episode_XXX/frame_Y.png, thumbnail.png
      drop/                                 the folder the demo sensor watches

The table has ``episode_id`` (string), ``num_frames`` (int64, 120 to 480, so
some episodes are longer than 300 frames and some shorter), ``task`` (text),
``thumbnail`` (one image path) and ``frames`` (a list of 2 or 3 image paths); both
image columns are marked ``mdr.datatype.image_path()``. Every image is a small valid
PNG written with ``zlib``/``struct``. Everything is deterministic, so the demo's
counters are known in advance (see :func:`expected_counts`).

Generation is idempotent and safe when several processes race: the dataset is
built in a temporary folder and renamed into place; the loser's copy is discarded.

Example:
    >>> import tempfile
    >>> from refiner_dagster.demo.data import ensure_demo_data, read_png_size
    >>> demo = ensure_demo_data(tempfile.mkdtemp())
    >>> import pyarrow.parquet as pq
    >>> table = pq.read_table(demo.table)
    >>> table.num_rows, read_png_size(table.column("frames")[0][0].as_py())
    (24, (32, 24))
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import refiner_core as mdr

DATA_DIR_ENV = "REFINER_DEMO_DATA_DIR"
NUM_EPISODES = 24
IMAGE_WIDTH = 32
IMAGE_HEIGHT = 24
THUMBNAIL_WIDTH = 16
THUMBNAIL_HEIGHT = 12
LONG_EPISODE_FRAMES = 300
TASKS = (
    "pick up the red block and place it in the bin",
    "open the top drawer",
    "stack the blue cup on the green cup",
    "wipe the table with the sponge",
    "push the button on the panel",
    "hang the mug on the rack",
)
_LAYOUT_VERSION = "v1"

__all__ = [
    "DATA_DIR_ENV",
    "LONG_EPISODE_FRAMES",
    "NUM_EPISODES",
    "DemoData",
    "demo_data_dir",
    "ensure_demo_data",
    "episode_rows",
    "expected_counts",
    "png_bytes",
    "read_png_size",
    "source_dtypes",
]


@dataclass(frozen=True)
class DemoData:
    """Where the generated demo dataset lives."""

    root: Path
    table: Path
    images: Path
    drop: Path


def demo_data_dir() -> Path:
    """``$REFINER_DEMO_DATA_DIR``, else ``$DAGSTER_HOME/refiner_demo``, else ``./demo_data``."""
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser().resolve()
    home = os.environ.get("DAGSTER_HOME")
    if home:
        return Path(home).expanduser().resolve() / "refiner_demo"
    return Path.cwd().resolve() / "demo_data"


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))
        + kind
        + payload
        + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)
    )


def png_bytes(width: int, height: int, seed: int) -> bytes:
    """A valid 8-bit RGB PNG with a gradient that depends on ``seed``."""
    rows = []
    for y in range(height):
        line = bytearray([0])  # filter type 0 (None) for each scanline
        for x in range(width):
            line += bytes(
                ((x * 8 + seed * 37) % 256, (y * 10 + seed * 11) % 256, (x * y + seed * 53) % 256)
            )
        rows.append(bytes(line))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
        + _chunk(b"IEND", b"")
    )


def read_png_size(path: str | os.PathLike[str]) -> tuple[int, int]:
    """``(width, height)`` from a PNG's IHDR chunk; raises ``ValueError`` if not a PNG."""
    with open(path, "rb") as handle:
        head = handle.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG file")
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def _num_frames(index: int) -> int:
    return 120 + (index * 97) % 361


def _num_images(index: int) -> int:
    return 2 + index % 2


def source_dtypes() -> dict[str, object]:
    """Column types of the source table; ``frames`` is a list of image paths."""
    return {
        "episode_id": mdr.datatype.string(),
        "num_frames": mdr.datatype.int64(),
        "task": mdr.datatype.string(),
        "thumbnail": mdr.datatype.image_path(),
        "frames": mdr.datatype.list_(mdr.datatype.image_path()),
    }


def episode_rows(images_dir: Path) -> list[dict[str, object]]:
    """The rows of the source table for images stored under ``images_dir``."""
    rows = []
    for index in range(NUM_EPISODES):
        episode_id = f"episode_{index:03d}"
        rows.append(
            {
                "episode_id": episode_id,
                "num_frames": _num_frames(index),
                "task": TASKS[index % len(TASKS)],
                "thumbnail": str(images_dir / episode_id / "thumbnail.png"),
                "frames": [
                    str(images_dir / episode_id / f"frame_{k}.png")
                    for k in range(_num_images(index))
                ],
            }
        )
    return rows


def _images(index: int) -> list[tuple[str, bytes]]:
    """File names and bytes of one episode's images (frames, then the thumbnail)."""
    images = [
        (f"frame_{k}.png", png_bytes(IMAGE_WIDTH, IMAGE_HEIGHT, index * 7 + k))
        for k in range(_num_images(index))
    ]
    images.append(("thumbnail.png", png_bytes(THUMBNAIL_WIDTH, THUMBNAIL_HEIGHT, index * 7 + 5)))
    return images


def _schema() -> pa.Schema:
    return pa.schema([mdr.datatype.to_field(n, t) for n, t in source_dtypes().items()])


def _build(tmp: Path, final: Path) -> None:
    """Write images and the table into ``tmp`` with paths that are valid once at ``final``."""
    rows = episode_rows(final / "images")
    for index, row in enumerate(rows):
        folder = tmp / "images" / str(row["episode_id"])
        folder.mkdir(parents=True)
        for name, data in _images(index):
            (folder / name).write_bytes(data)
    table = pa.Table.from_pylist(rows, schema=_schema())
    # Row groups of 6 episodes: jobs that ask for several shards get up to 4.
    pq.write_table(table, tmp / "episodes.parquet", row_group_size=6)


def ensure_demo_data(root: str | os.PathLike[str] | None = None) -> DemoData:
    """Generate the dataset under ``root`` (default :func:`demo_data_dir`) unless it exists."""
    base = Path(root).expanduser().resolve() if root is not None else demo_data_dir()
    final = base / "episodes" / _LAYOUT_VERSION
    drop = base / "drop"
    drop.mkdir(parents=True, exist_ok=True)
    if not (final / "episodes.parquet").is_file():
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=final.parent))
        try:
            _build(tmp, final)
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / "episodes.parquet").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return DemoData(root=base, table=final / "episodes.parquet", images=final / "images", drop=drop)


def expected_counts() -> dict[str, int]:
    """What the demo's assets must report: episodes, images and their bytes, long episodes."""
    images = [image for i in range(NUM_EPISODES) for image in _images(i)]
    frames = [data for name, data in images if name != "thumbnail.png"]
    thumbs = [data for name, data in images if name == "thumbnail.png"]
    return {
        "episodes": NUM_EPISODES,
        "frames": len(frames),
        "frame_bytes": sum(map(len, frames)),
        "thumbnails": len(thumbs),
        "thumbnail_bytes": sum(map(len, thumbs)),
        "long_episodes": sum(_num_frames(i) > LONG_EPISODE_FRAMES for i in range(NUM_EPISODES)),
    }
