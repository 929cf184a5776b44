"""bench/run_all.py end to end: fast workloads in --quick mode, in a subprocess.

Runs offline (no peer; S3 only on a local moto server) and asserts on the JSON file it wrote: one record per
measured case, with numeric medians and the machine it ran on.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_writes_numeric_medians(tmp_path):
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run_all.py"),
            "--quick",
            "--only",
            "map_async,batch_map_async,import,lerobot_merge,read_clip,verify_video",
            "--skip-peer",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["machine"]["cpu_count"] >= 1 and len(report["machine"]["commit"]) == 40
    assert [job["status"] for job in report["jobs"]] == ["ok"] * 6
    records = report["results"]
    assert {r["workload"] for r in records} == {
        *("map_async", "batch_map_async", "import"),
        *("lerobot_merge", "read_clip", "verify_video"),
    }
    for r in records:
        assert isinstance(r["refiner_s"], float) and math.isfinite(r["refiner_s"]), r
        assert r["refiner_s"] > 0 and r["baseline_s"] > 0 and r["ratio"] > 0, r
        assert r["met"] in (True, False, None)
    latency = next(r for r in records if r["case"].startswith("500 x 10 ms"))
    # 500 rows sleeping 10 ms, 32 in flight cannot beat 16 rounds of 10 ms
    assert latency["refiner_s"] >= 0.15 and latency["baseline_s"] >= 0.15
    assert "| workload | case | refiner |" in out.with_suffix(".md").read_text()
    assert "| map_async |" in done.stdout
