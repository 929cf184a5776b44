"""``refiner preview``: one self-contained HTML page about an output.

A contact sheet of sampled image assets (read through their blob references or file
paths and embedded in the page), the block-fill histogram as an inline SVG, and the
counters with their meanings. The page counts the images the browser decoded into
``<body data-images-decoded>``.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> from refiner_core.cli.preview import build_preview
    >>> from refiner_core.cli.storage import open_output
    >>> out = tempfile.mkdtemp()
    >>> _ = mdr.from_items([{"n": 1}]).write_parquet(out).launch_local()
    >>> "<h2>Counters</h2>" in build_preview(open_output(out)).html
    True
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from typing import Any

from .blocks import column_blocks, fill_histogram, list_media
from .counters import counters_of, meaning
from .inspection import human_bytes
from .rows import Reference, asset_columns, iter_rows, references
from .storage import StoredOutput

IMAGE_TYPES = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF87a": "image/gif",
    b"GIF89a": "image/gif",
    b"RIFF": "image/webp",
}
MAX_IMAGE_BYTES = 4 << 20


@dataclass(frozen=True)
class Preview:
    """The page, and how many images it embeds."""

    html: str
    images: int


def _mime(data: bytes) -> str | None:
    for magic, mime in IMAGE_TYPES.items():
        if data.startswith(magic):
            return mime
    return None


def _read(ref: Reference, storage_options: dict[str, Any]) -> bytes:
    from ..io.datafile import resolve

    fs, path = resolve(ref.path, storage_options if "://" in ref.path else None)
    if ref.offset is not None:
        assert ref.size is not None  # a blob reference always carries its range
        return fs.cat_file(path, start=ref.offset, end=ref.offset + ref.size)
    return fs.cat_file(path)


def _contact_sheet(output: StoredOutput, sample: int) -> tuple[str, int]:
    columns = [c for c in asset_columns(output) if c.kind == "image" and c.form != "bytes"]
    cells: list[str] = []
    for row in iter_rows(output):
        if len(cells) >= sample:
            break
        for ref in references(row, columns):
            if len(cells) >= sample or (ref.is_blob and (ref.size or 0) > MAX_IMAGE_BYTES):
                continue
            data = _read(ref, output.storage_options)
            mime = _mime(data)
            if mime is None:
                continue
            label = ref.column if ref.element is None else f"{ref.column}[{ref.element}]"
            uri = f"data:{mime};base64,{base64.b64encode(data).decode()}"
            cells.append(
                f'<figure><img src="{uri}" alt="{html.escape(label)} of row {row.row}">'
                f"<figcaption>row {row.row} · {html.escape(label)} · "
                f"{human_bytes(len(data))}</figcaption></figure>"
            )
    if not cells:
        return "<p>No image assets in this output.</p>", 0
    return f'<div class="sheet">{"".join(cells)}</div>', len(cells)


def _histogram(output: StoredOutput) -> str:
    stats = column_blocks(list_media(output), output.target_bytes)
    if not stats:
        return "<p>No packed blocks in this output.</p>"
    parts = []
    for s in stats:
        counts = fill_histogram(s.fills)
        top = max(counts) or 1
        bars = []
        for i, n in enumerate(counts):
            height = 100 * n / top
            bars.append(
                f'<rect x="{i * 30 + 2}" y="{110 - height:.1f}" width="26" height="{height:.1f}">'
                f"<title>{i * 10}-{i * 10 + 10} %: {n} block(s)</title></rect>"
                f'<text x="{i * 30 + 15}" y="124" text-anchor="middle">{i * 10}</text>'
            )
        base = "block size target" if s.target_known else "largest block"
        parts.append(
            f"<h3>{html.escape(s.column)}: {s.count} block(s), {human_bytes(s.total)}</h3>"
            f'<svg class="histogram" width="304" height="130" role="img" '
            f'aria-label="block fill histogram of {html.escape(s.column)}">{"".join(bars)}</svg>'
            f"<p>Fill = block size / {base} ({human_bytes(s.target)}); bins of 10 %.</p>"
        )
    return "".join(parts)


def _counters(output: StoredOutput) -> str:
    record = output.summary or {}
    rows = "".join(
        f"<tr><td><code>{html.escape(k)}</code></td><td>{v:,}</td>"
        f"<td>{html.escape(meaning(k))}</td></tr>"
        for k, v in counters_of(record).items()
    )
    if not rows:
        return "<p>Not finalized: no summary yet.</p>"
    return f"<table><tr><th>counter</th><th>value</th><th>meaning</th></tr>{rows}</table>"


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
.sheet { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; padding: 6px; border: 1px solid #ddd; border-radius: 6px; }
figure img { width: 128px; image-rendering: pixelated; display: block; }
figcaption { font-size: 12px; color: #555; }
svg.histogram rect { fill: #4a7bd0; } svg.histogram text { font-size: 10px; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee; }
"""
SCRIPT = """
window.addEventListener("load", () => {
  const decoded = [...document.images].filter((i) => i.complete && i.naturalWidth > 0);
  document.body.dataset.imagesDecoded = String(decoded.length);
});
"""


def build_preview(output: StoredOutput, *, sample: int = 24) -> Preview:
    """The preview page of ``output`` with up to ``sample`` images."""
    sheet, images = _contact_sheet(output, sample)
    summary = output.summary or {}
    title = html.escape(output.url)
    page = (
        f'<!doctype html><html><head><meta charset="utf-8"><title>refiner preview: {title}'
        f"</title><style>{STYLE}</style><script>{SCRIPT}</script></head>"
        f'<body data-images-embedded="{images}">'
        f"<h1>refiner preview</h1><p><code>{title}</code> · {html.escape(output.format)} · "
        f"{summary.get('rows_written', '?')} rows · {summary.get('shards', '?')} shards</p>"
        f"<h2>Contact sheet</h2><p>{images} sampled image asset(s).</p>{sheet}"
        f"<h2>Block fill</h2>{_histogram(output)}"
        f"<h2>Counters</h2>{_counters(output)}</body></html>"
    )
    return Preview(html=page, images=images)
