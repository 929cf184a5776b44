"""The ``lerobot:`` block of a ``RefinerDatasetComponent`` declaring ``format: lerobot``.

In ``defs.yaml``::

    type: refiner_dagster.RefinerDatasetComponent
    attributes:
      key: robotics/arm
      pipeline: my_project.pipelines:arm_episodes   # episode rows with video_clip columns
      format: lerobot
      lerobot: {fps: 30, robot_type: so100, video_files_size_in_mb: 200}

The block becomes the dataset asset's ``refiner/lerobot_*`` metadata
(:mod:`refiner_dagster.lerobot_format`), checked when the definitions load.

Example:
    >>> from refiner_dagster.lerobot_component import LeRobotSettings, component_metadata
    >>> component_metadata("lerobot", LeRobotSettings(fps=30), where="dataset arm")
    {'refiner/lerobot_fps': 30.0}
    >>> component_metadata("lerobot", None, where="dataset arm")
    Traceback (most recent call last):
    ...
    ValueError: dataset arm: format lerobot needs a lerobot block with its frame rate, e.g. lerobot: {fps: 30}
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field

from .lerobot_format import LEROBOT_FORMAT
from .strict_fields import StrictFields


class LeRobotSettings(StrictFields, dg.Model):
    """``write_lerobot``'s options of a dataset declared with ``format: lerobot``."""

    fps: float = Field(description="Frames per second of the dataset (LeRobot's fps).")
    robot_type: str | None = Field(default=None, description="meta/info.json robot_type.")
    video_files_size_in_mb: float | None = Field(
        default=None, description="Size target of each shared MP4 (default 200)."
    )
    data_files_size_in_mb: float | None = Field(
        default=None, description="Size target of each data Parquet file (default 100)."
    )
    chunks_size: int | None = Field(
        default=None, description="Files per chunk-XXX folder (default 1000)."
    )


def component_metadata(
    format: str, settings: LeRobotSettings | None, *, where: str
) -> dict[str, Any]:
    """The ``refiner/lerobot_*`` asset metadata of a component's ``lerobot`` block."""
    if format != LEROBOT_FORMAT:
        if settings is not None:
            raise ValueError(
                f"{where}: the lerobot block applies only with format: lerobot (format is "
                f"{format!r}); remove it or set format: lerobot"
            )
        return {}
    if settings is None:
        raise ValueError(
            f"{where}: format lerobot needs a lerobot block with its frame rate, "
            "e.g. lerobot: {fps: 30}"
        )
    given = settings.model_dump(exclude_none=True)
    return {f"refiner/lerobot_{name}": value for name, value in given.items()}
