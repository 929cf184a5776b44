"""The README's "Your first dataset" runs as written: its ``my_defs.py``, its shell commands
(the real ``dagster`` command, on a DAGSTER_HOME under ``$HOME``) and its read-back code.

Only the data folder changes (``/data/episodes/`` -> the test's folder), ``.venv/bin/`` is
this environment's, and ``$HOME`` is the test's folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import refiner_core as mdr

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "Your first dataset"
DAY = "2024-06-01"


def blocks(language: str) -> list[str]:
    body = README.read_text().split(f"\n## {SECTION}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", body, flags=re.S)


def test_first_dataset_materializes_a_day_and_reads_it_back(tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "episodes"
    data.mkdir()
    videos = []
    for i in range(3):
        video = data / f"clip_{i}.mp4"
        video.write_bytes(bytes([i + 1]) * (200 + i))
        videos.append(str(video))
    table = pa.table({"episode": [0, 1, 2], "video": videos})
    pq.write_table(table, data / f"{DAY}.parquet")
    pq.write_table(table.slice(0, 1), data / "2024-06-02.parquet")  # another day: not run

    defs_code, read_back = blocks("python")
    (commands,) = blocks("bash")
    work = tmp_path / "project"
    work.mkdir()
    (work / "my_defs.py").write_text(defs_code.replace("/data/episodes/", f"{data}/"))
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_")}
    env.update(HOME=str(tmp_path / "home"), DAGSTER_DISABLE_TELEMETRY="1")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands.replace(".venv/bin/", f"{bin_dir}/")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    home = tmp_path / "home" / "dagster_home"
    assert (home / "storage" / "refiner" / "episodes" / DAY).is_dir()
    assert not (home / "storage" / "refiner" / "episodes" / "2024-06-02").exists()

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    namespace: dict = {}
    exec(compile(read_back, "README.md", "exec"), namespace)
    rows = sorted(namespace["rows"], key=lambda r: r["episode"])
    assert [r["episode"] for r in rows] == [0, 1, 2]
    assert set(rows[0]["video"]) >= {"path", "offset", "size"}  # packed: a blob reference
    assert str(home) in rows[0]["video"]["path"]
    assert namespace["video"] in {Path(v).read_bytes() for v in videos}
    assert [mdr.read_blob(r["video"]) for r in rows] == [Path(v).read_bytes() for v in videos]
