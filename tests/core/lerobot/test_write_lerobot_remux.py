"""write_lerobot opens a clip encoded like its file's first one without decoding; any other
clip is opened whole and its format compared, so it is re-encoded when it differs."""

from __future__ import annotations

import os
from fractions import Fraction

import av
import numpy as np

import refiner_core as mdr
from tests.core.lerobot.layout import FPS, HEIGHT, WIDTH, write_dataset
from tests.core.lerobot.writing import episode_rows

FRONT = "observation.images.front"
LENGTHS = [5, 7, 6]


def _encode(path: str, frames: int, pix_fmt: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, pix_fmt
        for k in range(frames):
            image = np.full((HEIGHT, WIDTH, 3), 40 + 20 * k, np.uint8)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts, frame.time_base = k, Fraction(1, FPS)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def test_a_clip_of_the_same_size_but_another_pixel_format_is_re_encoded(tmp_path):
    source = write_dataset(str(tmp_path / "src"), LENGTHS, cameras=(FRONT,))
    other = _encode(str(tmp_path / "other" / "yuv444.mp4"), LENGTHS[2], "yuv444p")
    clip = {"path": other, "from_timestamp": 0.0, "to_timestamp": LENGTHS[2] / FPS}
    rows = episode_rows(source).map(lambda r: {FRONT: clip} if r.episode_index == 2 else {})
    out = str(tmp_path / "out")
    counters = rows.write_lerobot(out, fps=FPS).launch_local().summary.counters
    assert (counters["clips_remuxed"], counters["clips_transcoded"]) == (2, 1)
    frames = [frame for _, frame in mdr.read_frames(mdr.read_lerobot(out).take(18)[-1][FRONT])]
    assert abs(float(frames[0].mean()) - (40 + 20 * 5)) <= 3


def test_clips_encoded_alike_are_copied_into_one_file(tmp_path):
    paths = [_encode(str(tmp_path / "eps" / f"{n}.mp4"), 4, "yuv420p") for n in range(3)]
    rows = [
        {"tasks": ["t"], FRONT: {"path": p, "from_timestamp": 0.0, "to_timestamp": 4 / FPS}}
        for p in paths
    ]
    out = str(tmp_path / "out")
    pipeline = mdr.from_items(rows, dtypes={FRONT: mdr.datatype.video_clip()})
    counters = pipeline.write_lerobot(out, fps=FPS).launch_local().summary.counters
    assert (counters["clips_remuxed"], counters["clips_transcoded"]) == (3, 0)
    written = mdr.read_lerobot(out).materialize()
    assert len(written) == 12
    [(_, last)] = list(mdr.read_frames(written[-1][FRONT]))
    assert abs(float(last.mean()) - (40 + 20 * 3)) <= 3
