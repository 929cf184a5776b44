"""Benchmark: how long ``import refiner_core`` and ``import refiner_dagster`` take.

Each import runs in a fresh interpreter (``python -c "import X"``, timed inside the
child from before the import to after it), interleaved with its baseline, and the
median of ``--repeat`` runs is reported::

    python bench/bench_import.py --repeat 7

- ``refiner_core`` against ``pyarrow`` (what it cannot do without): target <= 0.5 s;
- ``refiner_dagster`` against ``dagster``: target <= 2.5 s.

It also reports which heavy modules each import pulled in (none of lance, s3fs, httpx,
dagster_aws should be there: they are imported where they are used). Like every
benchmark here it exits 0 when it measured, target met or not: a miss shows as
``OVER TARGET`` and as ``met: false`` in its record, so a run on a loaded machine is
reported rather than failed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import Result, add_json_option, write_results  # noqa: E402

PROBE = """
import json, sys, time
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
heavy = [m for m in {heavy!r} if m in sys.modules]
print(json.dumps({{"seconds": elapsed, "heavy": heavy}}))
"""
HEAVY = ("lance", "s3fs", "httpx", "pydantic", "dagster_aws", "boto3", "pandas")
CASES = (
    ("refiner_core", "pyarrow", 0.5),
    ("refiner_dagster", "dagster", 2.5),
)


def timed_import(module: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module, heavy=HEAVY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="fresh interpreters per import")
    add_json_option(parser)
    args = parser.parse_args()
    results: list[Result] = []
    for module, baseline, target in CASES:
        ours: list[float] = []
        base: list[float] = []
        heavy: set[str] = set()
        timed_import(module)  # warm the OS file cache for both
        timed_import(baseline)
        for _ in range(args.repeat):
            probe = timed_import(module)
            ours.append(probe["seconds"])
            heavy.update(probe["heavy"])
            base.append(timed_import(baseline)["seconds"])
        mine, theirs = statistics.median(ours), statistics.median(base)
        verdict = "ok" if mine <= target else "OVER TARGET"
        print(
            f"import {module}: {mine:.3f} s (median of {args.repeat}), import {baseline}: "
            f"{theirs:.3f} s, ratio {mine / theirs:.2f}x; target <= {target} s: {verdict}"
        )
        print(f"  heavy modules imported: {', '.join(sorted(heavy)) or 'none'}")
        results.append(
            Result(
                workload="import",
                case=f"import {module} (fresh interpreter)",
                refiner_s=mine,
                baseline=f"import {baseline}",
                baseline_s=theirs,
                target=f"<= {target} s",
                met=mine <= target,
                repeats=args.repeat,
                extra={"heavy_modules": ", ".join(sorted(heavy)) or "none"},
            )
        )
    write_results(args.json, results)


if __name__ == "__main__":
    main()
