"""run_all.py --load N: the busy processes run for the whole suite and leave no orphan behind.

Checked three ways: an error inside the block, Ctrl-C (SIGINT) to a real run_all.py, and
``kill -9`` of run_all.py (the burners notice their parent is gone and exit).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.compare import compare_files  # noqa: E402
from bench.load import Burners  # noqa: E402


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_gone(pids: list[int], within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [pid for pid in pids if alive(pid)]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def burning(pid: int) -> bool:
    """True once ``pid`` has used CPU time of its own (utime in /proc/pid/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) > 0


def test_burners_stop_when_the_block_fails():
    with pytest.raises(RuntimeError, match="a script failed"), Burners(2) as load:
        pids = load.pids
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        deadline = time.monotonic() + 10
        while not all(burning(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(burning(pid) for pid in pids), "the burners use no CPU"
        raise RuntimeError("a script failed")
    assert wait_gone(pids, within_s=0.5) == []


def test_negative_load_is_refused():
    with pytest.raises(ValueError, match="--load must be 0 or more"):
        Burners(-1)


def start_suite(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """run_all.py --load 2 on a workload that runs for seconds; its burners' pids."""
    suite = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "run_all.py"),
            *("--quick", "--skip-peer", "--load", "2", "--only", "planning"),
            *("--out", str(tmp_path / "results.json")),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    assert suite.stdout is not None
    for _ in range(20):
        line = suite.stdout.readline()
        if line.startswith("load: "):
            pids = [int(p) for p in line.split("(pids ", 1)[1].rstrip(")\n").split(", ")]
            assert len(pids) == 2 and all(alive(pid) for pid in pids)
            return suite, pids
    suite.kill()
    raise AssertionError(f"run_all.py --load 2 named no busy processes: {line!r}")


def test_ctrl_c_stops_the_burners(tmp_path):
    suite, pids = start_suite(tmp_path)
    suite.send_signal(signal.SIGINT)
    suite.communicate(timeout=60)
    assert suite.returncode != 0
    assert wait_gone(pids, within_s=1.0) == [], "burners outlived run_all.py after Ctrl-C"


def test_burners_leave_when_run_all_is_killed(tmp_path):
    suite, pids = start_suite(tmp_path)
    os.kill(suite.pid, signal.SIGKILL)
    suite.communicate(timeout=60)
    assert wait_gone(pids, within_s=5.0) == [], "burners outlived a killed run_all.py"


def test_load_is_recorded_and_compared(tmp_path):
    loaded = tmp_path / "loaded.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run_all.py"),
            *("--quick", "--skip-peer", "--load", "1", "--only", "import"),
            *("--out", str(loaded)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(loaded.read_text())
    assert report["load"]["burners"] == 1
    assert report["finished"] is True
    assert len(report["load"]["load_average_start"]) == 3
    assert len(report["jobs"][0]["load_average"]) == 3
    idle = tmp_path / "idle.json"
    idle_report = {**report, "load": {"burners": 0}, "results": report["results"][:1]}
    idle.write_text(json.dumps(idle_report))
    table = compare_files(idle, loaded)
    assert (
        "| workload | case | target | ratio idle | ratio loaded | met idle | met loaded |" in table
    )
    assert "loaded: `loaded.json`" in table and "1 busy processes (--load)" in table
    first = report["results"][0]
    row = next(line for line in table.splitlines() if f"| {first['case']} |" in line)
    assert row.count(f"{first['ratio']:.2f}x") == 2  # both columns hold the same record's ratio
    if len(report["results"]) > 1:
        assert "| not run |" in table  # a case only the loaded run measured


def test_compare_names_a_file_that_is_not_a_suite_result(tmp_path):
    bad = tmp_path / "script.json"
    bad.write_text("[]")
    with pytest.raises(SystemExit, match="script.json is not a results file"):
        compare_files(bad, bad)
