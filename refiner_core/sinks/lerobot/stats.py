"""Per-episode feature statistics and their merge, in the shape LeRobot v3.0 stores them.

Each feature gets ``min``, ``max``, ``mean``, ``std``, ``count`` and the quantiles
``q01 q10 q50 q90 q99``, per dimension (a vector of ``n`` values gives lists of ``n``);
images give one value per channel in ``[0, 1]``, shaped ``(3, 1, 1)``. Quantiles are exact
per episode; merged over episodes they are the count-weighted mean of the episodes'
quantiles, as LeRobot merges them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}

Stats = dict[str, Any]


def feature_stats(values: np.ndarray) -> Stats:
    """Statistics over axis 0 of ``values`` (one row per frame)."""
    values = np.asarray(values)
    if values.ndim == 1:
        values = values[:, None]
    values = values.reshape(len(values), -1)
    floats = values.astype(np.float64)
    stats: Stats = {
        "min": values.min(axis=0).tolist(),
        "max": values.max(axis=0).tolist(),
        "mean": floats.mean(axis=0).tolist(),
        "std": floats.std(axis=0).tolist(),
        "count": [len(values)],
    }
    quantiles = np.quantile(floats, list(QUANTILES.values()), axis=0)  # one sort for all
    for key, values_at in zip(QUANTILES, quantiles, strict=True):
        stats[key] = values_at.tolist()
    return stats


def image_stats(images: np.ndarray, frames: int) -> Stats:
    """Per-channel statistics of ``images`` (``(n, h, w, 3)`` uint8, a sample of a clip of
    ``frames`` frames), scaled to ``[0, 1]`` and shaped ``(3, 1, 1)`` like LeRobot's.

    They come from each channel's 256-bin histogram, so quantiles are the lowest value whose
    share of pixels at or below it reaches the quantile.
    """
    levels = np.arange(256, dtype=np.float64) / 255.0
    per_channel: dict[str, list[float]] = {}
    for channel in range(images.shape[-1]):
        counts = np.bincount(images[..., channel].ravel(), minlength=256).astype(np.float64)
        total = counts.sum()
        present = np.flatnonzero(counts)
        mean = float((counts * levels).sum() / total)
        values = {
            "min": float(levels[present[0]]),
            "max": float(levels[present[-1]]),
            "mean": mean,
            "std": float(np.sqrt((counts * (levels - mean) ** 2).sum() / total)),
        }
        share = np.cumsum(counts) / total
        for key, q in QUANTILES.items():
            values[key] = float(levels[min(255, int(np.searchsorted(share, q)))])
        for key, value in values.items():
            per_channel.setdefault(key, []).append(value)
    return {**{k: [[[v]] for v in vs] for k, vs in per_channel.items()}, "count": [frames]}


def merge_stats(episodes: list[Stats]) -> Stats:
    """One feature's statistics over several episodes (pooled mean and variance)."""
    counts = np.array([s["count"][0] for s in episodes], np.float64)
    total = counts.sum()

    def stack(key: str) -> np.ndarray:
        return np.stack([np.asarray(s[key], np.float64) for s in episodes])

    weights = counts.reshape(-1, *([1] * (stack("mean").ndim - 1)))
    means = stack("mean")
    mean = (means * weights).sum(axis=0) / total
    variance = ((stack("std") ** 2 + (means - mean) ** 2) * weights).sum(axis=0) / total
    merged: Stats = {
        "min": np.min(stack("min"), axis=0).tolist(),
        "max": np.max(stack("max"), axis=0).tolist(),
        "mean": mean.tolist(),
        "std": np.sqrt(variance).tolist(),
        "count": [int(total)],
    }
    for key in QUANTILES:
        merged[key] = ((stack(key) * weights).sum(axis=0) / total).tolist()
    return merged
