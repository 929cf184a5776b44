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

A case also measured with the public ``macrodata-refiner`` library (``bench/peer/``)
carries ``peer`` (what ran, e.g. ``"macrodata-refiner 0.3.9"``) and ``peer_s`` (its
median on the same data, interleaved with refiner's runs); ``peer_speedup`` is then
``peer_s / refiner_s`` and ``peer_target`` / ``peer_met`` judge it. A case that could
not be measured has ``refiner_s=None`` and says why in ``extra["not_measured"]``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field, fields
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
    peer: str | None = None
    peer_s: float | None = None
    peer_target: str = ""
    peer_met: bool | None = None
    peer_speedup: float | None = None

    def __post_init__(self) -> None:
        if self.peer_speedup is None and self.peer_s and self.refiner_s:
            object.__setattr__(self, "peer_speedup", self.peer_s / self.refiner_s)
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
    """The records a script wrote; keys this version does not know are kept in ``extra``."""
    return results_from_records(json.loads(path.read_text()))


def results_from_records(records: list[dict]) -> list[Result]:
    """:class:`Result` values from JSON records (a script's file, or a suite file's "results")."""
    known = {f.name for f in fields(Result)}
    results = []
    for record in records:
        unknown = {k: v for k, v in record.items() if k not in known}
        kept = {k: v for k, v in record.items() if k in known}
        if unknown:
            kept["extra"] = {**kept.get("extra", {}), **unknown}
        results.append(Result(**kept))
    return results
