"""The media files under an output's asset folders: packed blocks and copied files.

One listing per asset folder (a prefix listing on object stores) gives every file with
its size; ``fill`` is a block's size over the block size target (when known) or over
the largest block.

Example:
    >>> import os, tempfile, refiner_core as mdr
    >>> from refiner_core.cli.blocks import list_media
    >>> from refiner_core.cli.storage import open_output
    >>> src, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> paths = []
    >>> for i in range(3):
    ...     paths.append(os.path.join(src, f"{i}.png"))
    ...     _ = open(paths[-1], "wb").write(b"x" * 10)
    >>> pipeline = mdr.from_items([{"image": p} for p in paths],
    ...                           dtypes={"image": mdr.datatype.image_path()})
    >>> _ = pipeline.write_parquet(out, assets=mdr.BlobAssetConfig(target_bytes=20)).launch_local()
    >>> [(f.column, f.size) for f in list_media(open_output(out))]
    [('image', 20), ('image', 10)]
"""

from __future__ import annotations

import posixpath
import statistics
from dataclasses import dataclass

from .storage import StoredOutput


@dataclass(frozen=True)
class MediaFile:
    """One block (or copied file) of one asset column of one attempt."""

    attempt_dir: str  # e.g. assets/00000__1a2b3c4d5e6f
    column: str
    name: str
    size: int
    url: str

    @property
    def is_block(self) -> bool:
        return self.name.startswith("block-") and self.name.endswith(".bin")


@dataclass(frozen=True)
class ColumnBlocks:
    """Size statistics of one column's blocks; ``fills`` are fractions of ``target``."""

    column: str
    count: int
    total: int
    smallest: int
    median: float
    largest: int
    target: int
    target_known: bool
    fills: tuple[float, ...]


def list_media(output: StoredOutput) -> list[MediaFile]:
    """Every file under the output's asset folders, sorted by column and name."""
    folder = output.folder
    found: list[MediaFile] = []
    for attempt_dir in output.asset_dirs:
        base = folder.join(attempt_dir)
        try:
            listing = folder.fs.find(base, detail=True)
        except FileNotFoundError:
            continue
        for path, info in listing.items():
            relative = posixpath.relpath(path, base)
            column, _, name = relative.partition("/")
            if not name:
                column, name = "", relative
            found.append(
                MediaFile(
                    attempt_dir=attempt_dir,
                    column=column,
                    name=name,
                    size=int(info.get("size") or 0),
                    url=folder.url_of(f"{attempt_dir}/{relative}"),
                )
            )
    return sorted(found, key=lambda f: (f.column, f.attempt_dir, f.name))


def column_blocks(media: list[MediaFile], target: int | None) -> list[ColumnBlocks]:
    """Per column, statistics of its blocks (copied files are left out)."""
    stats = []
    for column in sorted({f.column for f in media if f.is_block}):
        sizes = [f.size for f in media if f.is_block and f.column == column]
        base = target or max(sizes) or 1
        stats.append(
            ColumnBlocks(
                column=column,
                count=len(sizes),
                total=sum(sizes),
                smallest=min(sizes),
                median=statistics.median(sizes),
                largest=max(sizes),
                target=base,
                target_known=target is not None,
                fills=tuple(min(s / base, 1.0) for s in sizes),
            )
        )
    return stats


def fill_histogram(fills: tuple[float, ...] | list[float], bins: int = 10) -> list[int]:
    """How many blocks fall in each of ``bins`` equal fill ranges from 0 to 100 %."""
    counts = [0] * bins
    for fill in fills:
        counts[min(int(fill * bins), bins - 1)] += 1
    return counts
