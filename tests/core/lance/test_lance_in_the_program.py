"""A program that calls Lance itself, then runs refiner's Lance pipelines.

Each script runs in a fresh Python process that is the launching process: it writes
and opens a dataset with ``lance`` directly (as a notebook or a script does), then
launches pipelines. The pytest process itself never runs Lance (see helpers.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ROUNDS = 6

pytestmark = pytest.mark.timeout(420)


def run_script(body: str) -> list[str]:
    script = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n" + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=360, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.split()


def test_lance_pipelines_after_the_program_used_lance_itself(tmp_path: Path) -> None:
    words = run_script(
        f"""
        import lance
        import pyarrow as pa
        import refiner_core as mdr
        from refiner_core.execution.start_methods import resolve_start_method
        from tests.core.lance.helpers import lance_in_this_process

        base = {str(tmp_path)!r}
        own = base + "/own.lance"
        print("imported", resolve_start_method(None))  # loaded, not yet used: fork
        lance.write_dataset(pa.table({{"id": list(range(40))}}), own)
        print("opened", lance.dataset(own).count_rows(), lance_in_this_process())
        print("used", resolve_start_method(None))
        for r in range({ROUNDS}):
            out = f"{{base}}/out{{r}}.lance"
            mdr.read_lance(own, num_shards=4).map(
                lambda row: {{"square": row.id * row.id}}
            ).write_lance(out).launch_local(num_workers=2)
            mdr.from_items([{{"id": 100 + r, "square": 0}}]).write_lance(
                out, mode="append"
            ).launch_local(num_workers=2)
            rows = mdr.read_lance(out).materialize()
            good = sorted(row.id for row in rows) == [*range(40), 100 + r] and all(
                row.square == (row.id * row.id if row.id < 100 else 0) for row in rows
            )
            print("round", r, len(rows), good)
        print("read", sum(len(mdr.read_lance(own).materialize()) for _ in range(20)))
        print("own", lance.dataset(own).count_rows())
        """
    )
    assert words[:6] == ["imported", "fork", "opened", "40", "True", "used"]
    assert words[6] == "spawn"
    rounds = [words[i : i + 4] for i in range(7, 7 + 4 * ROUNDS, 4)]
    assert rounds == [["round", str(r), "41", "True"] for r in range(ROUNDS)]
    assert words[7 + 4 * ROUNDS :] == ["read", str(40 * 20), "own", "40"]
