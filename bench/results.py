"""Machine-readable benchmark results, shared by every script in ``bench/``.

Each script takes ``--json PATH`` and, when given, writes its measurements there as a
list of :class:`Result` records; ``bench/run_all.py`` gathers them into one table::

    from bench.results import Result, add_json_option, write_results

    parser = argparse.ArgumentParser()
    add_json_option(parser)
    args = parser.parse_args()
    write_results(args.json, [
        Result(
            workload="map_async", case="2,000 x 10 ms, 32 in flight",
            refiner_s=0.70, baseline="asyncio + Semaphore(32)", baseline_s=0.66,
            target="<= 1.1x", met=True, repeats=5,
        )
    ])

``ratio`` is ``refiner_s / baseline_s`` unless a script sets it (for "x faster" targets
it is ``baseline_s / refiner_s``; ``ratio_kind`` says which).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

RatioKind = Literal["slowdown", "speedup", "fraction", "value"]


@dataclass(frozen=True)
class Result:
    """One measured case: refiner's median time against its same-run baseline."""

    workload: str
    case: str
    refiner_s: float | None
    baseline: str
    baseline_s: float | None
    target: str
    met: bool | None
    repeats: int
    ratio: float | None = None
    ratio_kind: RatioKind = "slowdown"
    extra: dict[str, float | int | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ratio is None and self.refiner_s and self.baseline_s:
            if self.ratio_kind == "speedup":
                object.__setattr__(self, "ratio", self.baseline_s / self.refiner_s)
            elif self.ratio_kind == "slowdown":
                object.__setattr__(self, "ratio", self.refiner_s / self.baseline_s)


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the results as JSON (a list of records) to PATH",
    )


def write_results(path: Path | None, results: list[Result]) -> None:
    """Write ``results`` to ``path`` as a JSON list; do nothing when ``path`` is None."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")


def read_results(path: Path) -> list[Result]:
    return [Result(**record) for record in json.loads(path.read_text())]
