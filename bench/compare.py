"""One table from two suite runs: each case's ratio idle and loaded (``run_all.py --compare``).

Cases are matched by workload and case name; a case only one run measured keeps an
empty cell for the other::

    .venv/bin/python bench/run_all.py --compare idle.json loaded.json
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench.results import Result, results_from_records


@dataclass(frozen=True)
class SuiteRun:
    """One results file of ``run_all.py``: its records and the load it ran under."""

    path: Path
    results: list[Result]
    burners: int
    load_start: float | None
    load_end: float | None
    commit: str
    date: str

    @classmethod
    def read(cls, path: Path) -> SuiteRun:
        try:
            report = json.loads(path.read_text())
            records = report["results"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise SystemExit(
                f"--compare: {path} is not a results file of bench/run_all.py ({error}); "
                "pass the JSON file its --out named"
            ) from None
        results = results_from_records(records)
        machine = report.get("machine", {})
        load = report.get("load", {})
        return cls(
            path=path,
            results=results,
            burners=int(load.get("burners", 0)),
            load_start=_first(machine.get("load_average_start")),
            load_end=_first(machine.get("load_average_end")),
            commit=str(machine.get("commit", ""))[:10],
            date=str(report.get("date", ""))[:16].replace("T", " "),
        )

    def describe(self, label: str) -> str:
        return (
            f"{label}: `{self.path.name}`, {self.date} UTC, commit {self.commit}, "
            f"{self.burners} busy processes (--load), load average "
            f"{_load(self.load_start)} at start, {_load(self.load_end)} at end"
        )


def compare_files(idle: Path, loaded: Path) -> str:
    """The Markdown table of both runs, preceded by one line per run naming its load."""
    first, second = SuiteRun.read(idle), SuiteRun.read(loaded)
    return "\n".join(
        [first.describe("idle"), second.describe("loaded"), "", compare_table(first, second)]
    )


def compare_table(idle: SuiteRun, loaded: SuiteRun) -> str:
    head = "| workload | case | target | ratio idle | ratio loaded | met idle | met loaded |"
    lines = [head, "|" + " --- |" * 7]
    by_key = {(r.workload, r.case): r for r in loaded.results}
    seen = set()
    for r in idle.results:
        seen.add((r.workload, r.case))
        lines.append(_row(r, by_key.get((r.workload, r.case))))
    for r in loaded.results:
        if (r.workload, r.case) not in seen:
            lines.append(_row(None, r))
    return "\n".join(lines)


def _row(idle: Result | None, loaded: Result | None) -> str:
    some = idle or loaded
    assert some is not None
    target = some.target or (loaded.target if loaded else "")
    return (
        f"| {some.workload} | {some.case} | {target} | {_ratio(idle)} | {_ratio(loaded)} "
        f"| {_met(idle)} | {_met(loaded)} |"
    )


def _ratio(r: Result | None) -> str:
    if r is None:
        return "not run"
    if r.ratio is None:
        return "not measured" if "not_measured" in r.extra else ""
    if r.ratio_kind == "speedup":
        return f"{r.ratio:.2f}x faster"
    if r.ratio_kind == "fraction":
        return f"{r.ratio:.0%}"
    if r.ratio_kind == "value":
        return f"{r.ratio:.3g} {r.extra.get('unit', '')}".strip()
    return f"{r.ratio:.2f}x"


def _met(r: Result | None) -> str:
    if r is None:
        return ""
    return {True: "yes", False: "**no**", None: ""}[r.met]


def _first(value: object) -> float | None:
    if isinstance(value, list | tuple) and value:
        return float(value[0])
    return None


def _load(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"
