"""Run by the LeRobot venv's python (not refiner's): records a small dataset with LeRobot
itself, then prints, as JSON, every frame as LeRobot reads it back.

Usage: python lerobot_client_script.py ROOT
"""

from __future__ import annotations

import json
import sys

import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

CAMERA = "observation.images.cam"
LENGTHS = (5, 7, 6)
TASKS = ("pick", "place")


def main(root: str) -> None:
    features = {
        "observation.state": {"dtype": "float32", "shape": (3,), "names": ["a", "b", "c"]},
        "action": {"dtype": "float32", "shape": (2,), "names": ["x", "y"]},
        CAMERA: {"dtype": "video", "shape": (24, 32, 3), "names": ["height", "width", "channels"]},
    }
    dataset = LeRobotDataset.create("refiner/test", fps=10, features=features, root=root)
    index = 0
    for episode, length in enumerate(LENGTHS):
        for _ in range(length):
            dataset.add_frame(
                {
                    "observation.state": np.array([index, index / 3, -index], np.float32),
                    "action": np.array([index * 0.25, 1.5], np.float32),
                    CAMERA: np.full((24, 32, 3), (index * 13) % 200 + 20, np.uint8),
                    "task": TASKS[episode % 2],
                }
            )
            index += 1
        dataset.save_episode()
    dataset.finalize()

    read = LeRobotDataset("refiner/test", root=root, video_backend="pyav")
    frames = []
    for i in range(len(read)):
        item = read[i]
        frames.append(
            {
                "index": int(item["index"]),
                "episode_index": int(item["episode_index"]),
                "frame_index": int(item["frame_index"]),
                "timestamp": float(item["timestamp"]),
                "observation.state": item["observation.state"].tolist(),
                "action": item["action"].tolist(),
                "task": item["task"],
                "pixel": float(item[CAMERA].mean()) * 255,
            }
        )
    json.dump(frames, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
