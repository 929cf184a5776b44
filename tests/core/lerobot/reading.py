"""Reading helpers shared by the LeRobot tests."""

from __future__ import annotations

import io

import av

import refiner_core as mdr


def rows_of(pipeline: mdr.Pipeline) -> list[dict]:
    """Every row the pipeline's source gives, shard after shard."""
    return [
        row
        for shard in pipeline.plan()
        for block in pipeline.source.read(shard, batch_rows=1000)
        for row in block.to_pylist()
    ]


def av_frames(data: bytes) -> list:
    """The decoded frames of an MP4 held in memory."""
    with av.open(io.BytesIO(data)) as container:
        return list(container.decode(container.streams.video[0]))
