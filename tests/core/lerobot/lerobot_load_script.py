"""Run by the LeRobot venv's python (not refiner's): loads the dataset at ROOT with
``LeRobotDataset`` and prints, as JSON, every frame as LeRobot reads it (each camera as
its mean pixel value, 0..255) and the cameras' statistics from its ``meta``.

Usage: python lerobot_load_script.py ROOT
"""

from __future__ import annotations

import json
import sys

from lerobot.datasets.lerobot_dataset import LeRobotDataset


def main(root: str) -> None:
    dataset = LeRobotDataset("refiner/written", root=root, video_backend="pyav")
    frames = []
    for i in range(len(dataset)):
        item = dataset[i]
        frame = {
            "index": int(item["index"]),
            "episode_index": int(item["episode_index"]),
            "frame_index": int(item["frame_index"]),
            "timestamp": float(item["timestamp"]),
            "observation.state": item["observation.state"].tolist(),
            "action": item["action"].tolist(),
            "task": item["task"],
        }
        for key in dataset.meta.video_keys:
            frame[key] = float(item[key].mean()) * 255
        frames.append(frame)
    camera_stats = {
        key: {name: value.tolist() for name, value in dataset.meta.stats[key].items()}
        for key in dataset.meta.video_keys
    }
    json.dump(
        {"frames": frames, "stats_keys": sorted(dataset.meta.stats), "camera_stats": camera_stats},
        sys.stdout,
    )


if __name__ == "__main__":
    main(sys.argv[1])
