"""LeRobot v2.1 metadata: ``meta/episodes.jsonl`` and ``meta/tasks.jsonl``, and one data
file and one MP4 per episode (``chunks_size`` episodes per chunk), each video starting at 0."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from .lerobot_meta import Episode, EpisodeVideo


def _jsonl(fs: Any, path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with fs.open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                yield number, json.loads(line)


def v21_episodes(
    fs: Any, base: str, root: str, info: dict[str, Any], keys: tuple[str, ...], fps: float
) -> Iterator[Episode]:
    path = posixpath.join(base, "meta", "episodes.jsonl")
    if not fs.exists(path):
        raise ValueError(f"read_lerobot {root}: no meta/episodes.jsonl; the dataset is incomplete")
    chunk_size = int(info.get("chunks_size") or 1000)
    for number, record in _jsonl(fs, path):
        try:
            index, length = int(record["episode_index"]), int(record["length"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"read_lerobot {root}/meta/episodes.jsonl line {number}: {record!r} needs an "
                "integer episode_index and length"
            ) from exc
        names = {"episode_chunk": index // chunk_size, "episode_index": index}
        videos = tuple(
            (
                key,
                EpisodeVideo(
                    f"{root}/{info['video_path'].format(video_key=key, **names)}", 0.0, length / fps
                ),
            )
            for key in keys
        )
        data = f"{root}/{info['data_path'].format(**names)}"
        yield Episode(index, length, tuple(record.get("tasks") or ()), data, videos)


def with_v21_stats(episodes: list[Episode], fs: Any, base: str, skipped: set[str]) -> list[Episode]:
    """``episodes`` with their statistics from ``meta/episodes_stats.jsonl`` (when the
    dataset has it), named ``stats/<feature>/<name>`` as v3.0 names them; features in
    ``skipped`` (cameras not asked for) are left out."""
    path = posixpath.join(base, "meta", "episodes_stats.jsonl")
    if not fs.exists(path):
        return episodes
    by_index: dict[int, tuple[tuple[str, Any], ...]] = {}
    for _, record in _jsonl(fs, path):
        by_index[int(record["episode_index"])] = tuple(
            (f"stats/{feature}/{name}", value)
            for feature, values in sorted((record.get("stats") or {}).items())
            if feature not in skipped
            for name, value in sorted(values.items())
        )
    return [replace(e, stats=by_index.get(e.index, ())) for e in episodes]


def v21_tasks(fs: Any, base: str) -> dict[int, str]:
    path = posixpath.join(base, "meta", "tasks.jsonl")
    if not fs.exists(path):
        return {}
    return {int(r["task_index"]): r["task"] for _, r in _jsonl(fs, path)}
