"""Run every benchmark, gather their records, print one table and write one JSON file.

Each script runs in a fresh process with ``--json`` into the results folder and
``--repeat`` (at least 3; every script alternates its sides inside each repeat), so a
ratio always compares two medians measured in the same run. The public
``macrodata-refiner`` library (``bench/peer/``) runs inside the pack, copy and
``map_async`` scripts, between refiner's runs on the same data::

    .venv/bin/python bench/run_all.py                      # everything, about 30 minutes
    .venv/bin/python bench/run_all.py --quick              # small sizes, a few minutes
    .venv/bin/python bench/run_all.py --only pack,copy --skip-peer
    .venv/bin/python bench/run_all.py --load 2 --out loaded.json  # 2 busy processes throughout
    .venv/bin/python bench/run_all.py --compare idle.json loaded.json  # one table, both runs

Writes ``bench/results/<UTC date and time>.json`` (or ``--out``; rewritten after each
script, ``"finished": false`` until the last has ended): the machine (CPUs,
Python, load average, git commit), every script's command, exit status, duration
and log file, and every record (see ``bench/results.py``); the table is printed and
written beside it as Markdown. A script that fails, or does not write JSON yet, is
reported as "not measured: <reason>" and the run goes on. ``--load N`` keeps N busy
processes running from the first script to the last (``bench/load.py``) and records N
and the load average before, during (after each script) and after the run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.compare import compare_files  # noqa: E402
from bench.jobs import DEFAULT_WORKLOADS, JOBS, WORKLOADS, Job  # noqa: E402
from bench.load import Burners  # noqa: E402
from bench.results import Result, read_results  # noqa: E402

BENCH = ROOT / "bench"
PEER_SETUP = BENCH / "peer" / "setup.sh"
PEER_PYTHON = BENCH / "peer" / ".venv" / "bin" / "python"


# running ----------------------------------------------------------------------------


def supports_json(script: Path) -> str | None:
    """None when ``script --help`` lists ``--json``, else why it cannot be measured."""
    if not script.exists():
        return f"{script.name} does not exist (yet)"
    try:
        done = subprocess.run(
            [sys.executable, str(script), "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return f"{script.name} --help did not answer in 120 s"
    if done.returncode != 0:
        return f"{script.name} --help failed: {last_line(done.stderr or done.stdout)}"
    if "--json" not in done.stdout:
        return f"{script.name} has no --json option yet"
    return None


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no output)"


def job_args(job: Job, args: argparse.Namespace, selected: set[str], peer: bool) -> list[str]:
    extra = list(job.quick if args.quick else job.full)
    repeat = args.repeat
    if "--repeat-min" in extra:  # some scripts repeat more in a full run
        i = extra.index("--repeat-min")
        repeat = max(repeat, int(extra[i + 1]))
        del extra[i : i + 2]
    if job.name == "assets" and selected.isdisjoint({"copy", "repack"}):
        extra.append("--pack-only")
    if job.peer:
        extra.append("--peer" if peer and "peer" in selected else "--no-peer")
    return [job.repeat_flag, str(repeat), *extra]


def not_measured(job: Job, reason: str) -> list[Result]:
    return [
        Result(
            workload=w,
            case=f"{job.script}",
            refiner_s=None,
            baseline="",
            baseline_s=None,
            target="",
            met=None,
            repeats=0,
            extra={"not_measured": reason},
        )
        for w in job.workloads
    ]


def run_job(job: Job, argv: list[str], out_dir: Path) -> tuple[list[Result], dict]:
    script = BENCH / job.script
    json_path = out_dir / f"{job.name}.json"
    log_path = out_dir / "logs" / f"{job.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.unlink(missing_ok=True)
    command = [sys.executable, str(script), *argv, "--json", str(json_path)]
    info: dict = {"job": job.name, "command": command, "log": str(log_path)}
    reason = supports_json(script)
    if reason is not None:
        info.update(status="skipped", reason=reason)
        return not_measured(job, reason), info
    started = time.perf_counter()
    print(f"==> {job.name}: {' '.join(command[1:])}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DAGSTER_DISABLE_TELEMETRY": "1"}
    with open(log_path, "w") as log:
        try:
            done = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
                timeout=job.timeout_s,
            )
            returncode: int | None = done.returncode
        except subprocess.TimeoutExpired:
            returncode = None
    seconds = time.perf_counter() - started
    info.update(seconds=round(seconds, 1), returncode=returncode, load_average=os.getloadavg())
    tail = last_line(log_path.read_text(errors="replace"))
    results = read_results(json_path) if json_path.exists() else []
    if returncode is None:
        reason = f"timed out after {job.timeout_s:.0f} s"
    elif returncode != 0:
        reason = f"exit {returncode}: {tail}"
    elif not results:
        reason = "wrote no JSON records"
    info["status"] = "ok" if reason is None else "failed"
    if reason is not None:
        info["reason"] = reason
    print(f"    {info['status']} in {seconds:.0f} s" + (f" ({reason})" if reason else ""))
    measured = {r.workload for r in results}
    missing = [w for w in job.workloads if w not in measured]
    if reason is not None and missing:
        results += [
            r for r in not_measured(job, reason) if r.workload in missing
        ]  # keep what a failing script did write
    return results, info


def ensure_peer() -> tuple[bool, str]:
    """Create bench/peer/.venv if needed; (ready, version or why not)."""
    try:
        done = subprocess.run(
            ["bash", str(PEER_SETUP)], capture_output=True, text=True, timeout=900
        )
    except subprocess.TimeoutExpired:
        return False, "bench/peer/setup.sh timed out"
    if done.returncode != 0 or not PEER_PYTHON.exists():
        return False, f"bench/peer/setup.sh failed: {last_line(done.stderr or done.stdout)}"
    return True, last_line(done.stdout)


# reporting ----------------------------------------------------------------------------


def seconds(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"


def times(value: float) -> str:
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def ratio_text(r: Result) -> str:
    if r.ratio is None:
        return ""
    if r.ratio_kind == "speedup":
        return f"{times(r.ratio)} faster"
    if r.ratio_kind == "fraction":
        return f"{r.ratio:.0%}"
    if r.ratio_kind == "value":
        return f"{r.ratio:.3g} {r.extra.get('unit', '')}".strip()
    return f"{r.ratio:.2f}x"


def verdict(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: ""}[met]


def table(results: list[Result]) -> str:
    head = (
        "| workload | case | refiner | baseline | ratio | target | met | peer | refiner vs peer |"
    )
    lines = [head, "|" + " --- |" * 9]
    for r in results:
        if r.refiner_s is None and "not_measured" in r.extra:
            lines.append(
                f"| {r.workload} | {r.case} | not measured: {r.extra['not_measured']} | | | | | | |"
            )
            continue
        base = f"{r.baseline} {seconds(r.baseline_s)}".strip()
        peer = f"{r.peer} {seconds(r.peer_s)}" if r.peer and r.peer_s else ""
        versus = ""
        if r.peer_speedup:
            versus = f"{times(r.peer_speedup)} faster"
            if r.peer_target:
                versus += f" (target {r.peer_target.replace(' faster', '')}: "
                versus += f"{verdict(r.peer_met) or '?'})"
        lines.append(
            f"| {r.workload} | {r.case} | {seconds(r.refiner_s)} | {base} | {ratio_text(r)} "
            f"| {r.target} | {verdict(r.met)} | {peer} | {versus} |"
        )
    return "\n".join(lines)


def git_commit() -> dict:
    def git(*a: str) -> str:
        done = subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def machine() -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        ),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_start": os.getloadavg(),
        **git_commit(),
    }


# main ---------------------------------------------------------------------------------


def parse_only(text: str | None) -> set[str]:
    if not text:
        return set(DEFAULT_WORKLOADS)
    chosen = {w.strip() for w in text.split(",") if w.strip()}
    unknown = chosen - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"--only: unknown workload(s) {sorted(unknown)}; choose from {WORKLOADS}")
    return chosen | {"peer"}  # the peer columns come with the workloads that have them


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument(
        "--only", metavar="WORKLOADS", help=f"comma-separated, from: {', '.join(WORKLOADS)}"
    )
    parser.add_argument("--skip-peer", action="store_true", help="do not run macrodata-refiner")
    parser.add_argument(
        "--repeat", type=int, default=None, help="repeats per case (default 3; 1 with --quick)"
    )
    parser.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="run N CPU-burning processes (niceness 0) for the whole suite",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("IDLE", "LOADED"),
        help="print one table of two results files' ratios side by side, and run nothing",
    )
    args = parser.parse_args(argv)
    if args.compare:
        print(compare_files(*args.compare))
        return 0
    if args.load < 0:
        parser.error(f"--load must be 0 or more busy processes, got {args.load}")
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.repeat < 3 and not args.quick:
        parser.error("--repeat must be at least 3 (or use --quick)")
    selected = parse_only(args.only)
    now = dt.datetime.now(dt.UTC)
    out = args.out or BENCH / "results" / f"{now:%Y-%m-%dT%H%M%SZ}.json"
    out_dir = out.with_suffix("")
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [
        job for job in JOBS if selected.intersection(job.workloads) and (job.default or args.only)
    ]

    started = time.perf_counter()
    info = machine()
    print(
        f"{info['cpu_count']} CPUs, Python {info['python']}, commit {info['commit'][:10]}"
        f"{' (dirty)' if info['dirty'] else ''}, load average {info['load_average_start'][0]:.1f}"
    )
    peer_ready, peer_note = False, "skipped (--skip-peer)"
    if not args.skip_peer and any(job.peer for job in jobs):
        peer_ready, peer_note = ensure_peer()
        print(f"peer: {peer_note}")
    results: list[Result] = []
    runs: list[dict] = []

    def save(finished: bool) -> None:
        """The results file; rewritten after every script, so a run cut short keeps its part."""
        report = {
            "date": now.isoformat(),
            "command": [sys.executable, *sys.argv],
            "quick": args.quick,
            "repeat": args.repeat,
            "finished": finished,
            "load": {
                "burners": args.load,
                "load_average_start": info["load_average_start"],
                "load_average_end": info.get("load_average_end", os.getloadavg()),
            },
            "seconds": round(time.perf_counter() - started, 1),
            "machine": info,
            "peer": peer_note,
            "jobs": runs,
            "results": [asdict(r) for r in results],
        }
        out.write_text(json.dumps(report, indent=2) + "\n")

    with Burners(args.load) as burners:
        if args.load:
            pids = ", ".join(map(str, burners.pids))
            print(f"load: {args.load} busy processes (pids {pids})", flush=True)
        for job in jobs:
            got, ran = run_job(job, job_args(job, args, selected, peer_ready), out_dir)
            results += [r for r in got if r.workload in selected]
            runs.append(ran)
            save(finished=False)
        info["load_average_end"] = os.getloadavg()
    elapsed = time.perf_counter() - started
    text = table(results)
    note = (
        f"`{' '.join(['bench/run_all.py', *(argv if argv is not None else sys.argv[1:])])}`, "
        f"{now:%Y-%m-%d %H:%M} UTC, {elapsed / 60:.1f} min, {info['cpu_count']} CPUs, "
        f"{args.load} busy processes (--load), "
        f"load average {info['load_average_start'][0]:.1f} at start, "
        f"{info['load_average_end'][0]:.1f} at end; peer: {peer_note}"
    )
    print(f"\n{note}\n\n{text}\n")
    save(finished=True)
    out.with_suffix(".md").write_text(f"{note}\n\n{text}\n")
    print(f"wrote {out} and {out.with_suffix('.md')} (logs in {out_dir / 'logs'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
