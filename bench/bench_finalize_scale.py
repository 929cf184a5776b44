"""Benchmark: a fan-out dataset's finalize step at 1,000 / 3,000 / 10,000 one-row shards.

Each case materializes one ``build_dataset_asset(max_tasks=64)`` dataset of ``N``
one-row shards, each row pointing to a tiny media file (packed into blocks), with
Dagster's in-process executor on a real instance: plan -> 64 write steps -> finalize.
It reports:

- the attempt manifests the write steps read (counted at the engine's one manifest
  reader); target <= 1.1 x shards;
- the finalize step (count + reduce + audit + publish), against a plain parallel read of
  every manifest of the version (one listing, then 32 threads each reading and parsing
  whole files through fsspec) measured in the same run. The step's first run is the one
  Dagster ran; the repeats call the same step function again with the same inputs in a
  Dagster op context (a published version finalizes again idempotently), each
  interleaved with a baseline read; target <= 3x;
- the growth of finalize from the smallest to the largest case,
  ``log(t_large / t_small) / log(N_large / N_small)``; target <= 1.1.

``--store s3`` writes to a moto S3 server behind the test proxy adding ``--latency-ms``
(20) per request, each in a process of its own so they share no GIL with the steps or
with each other (``--servers one-process`` puts both in one child process, as before;
``in-process`` in threads of this one); the results name the layout. The target there is finalize at 10,000 shards <= 60 s (``--shards 1000,3000`` extrapolates
from the two largest cases with their measured exponent and says so).

Run from the repository root::

    .venv/bin/python bench/bench_finalize_scale.py --repeat 3
    .venv/bin/python bench/bench_finalize_scale.py --store s3 --shards 1000,3000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")

import dagster as dg  # noqa: E402
import fsspec  # noqa: E402

import refiner_core as mdr  # noqa: E402
import refiner_dagster as rd  # noqa: E402
from bench.bench_s3_assets import start_servers  # noqa: E402
from bench.results import Result, add_json_option, write_results  # noqa: E402
from refiner_core.manifests import reading  # noqa: E402
from refiner_dagster import fanout  # noqa: E402
from refiner_dagster.fanout_finalize import finalize_step  # noqa: E402
from tests.s3_server import (  # noqa: E402
    DUMMY_KEY,
    DUMMY_SECRET,
    REGION,
    SERVER_LAYOUTS,
    dummy_aws_env,
    start_local_s3,
)

MEDIA_ENV = "REFINER_BENCH_FINALIZE_MEDIA"
SHARDS_ENV = "REFINER_BENCH_FINALIZE_SHARDS"
MEDIA_FILES = 256
MANIFEST_READERS = 32
ASSET = "scale"
LAYOUTS = {**SERVER_LAYOUTS, "one-process": "moto and the proxy together in one child process"}


def scale_pipeline(context: Any = None) -> mdr.Pipeline:
    """``N`` one-row shards, each row naming a ~100-byte media file."""
    media, shards = os.environ[MEDIA_ENV], int(os.environ[SHARDS_ENV])
    items = [
        {"i": i, "image": os.path.join(media, f"{i % MEDIA_FILES:03d}.bin")} for i in range(shards)
    ]
    return mdr.from_items(items, items_per_shard=1, dtypes={"image": mdr.datatype.image_path()})


@dataclass
class StepProbe:
    """What the benchmark sees of the fan-out steps: manifest reads per step kind, the
    finalize step's inputs and the seconds it ran."""

    phase: str = "other"
    reads: dict[str, int] = field(default_factory=dict)
    finalize_s: float = 0.0
    finalize_args: tuple[Any, ...] = ()


PROBE = StepProbe()


def _install_probe() -> None:
    """Count every manifest the engine's reader parses, by the step that asked for it."""
    read_one = reading.read_manifest
    write_step, finalize_step = fanout.write_step, fanout.finalize_step

    def counted(folder: Any, path: str) -> Any:
        PROBE.reads[PROBE.phase] = PROBE.reads.get(PROBE.phase, 0) + 1
        return read_one(folder, path)

    def writing(spec: Any, context: Any, task: Any) -> Any:
        PROBE.phase = "write"
        try:
            return write_step(spec, context, task)
        finally:
            PROBE.phase = "other"

    def finalizing(spec: Any, context: Any, plan: Any, written: Any) -> Iterator[Any]:
        PROBE.phase = "finalize"
        PROBE.finalize_args = (spec, plan, written)
        started = time.perf_counter()
        try:
            yield from finalize_step(spec, context, plan, written)
        finally:
            PROBE.finalize_s = time.perf_counter() - started
            PROBE.phase = "other"

    reading.read_manifest = counted  # type: ignore[assignment]
    fanout.write_step = writing  # type: ignore[assignment]
    fanout.finalize_step = finalizing  # type: ignore[assignment]


def baseline_read(url: str, options: dict[str, Any]) -> tuple[float, int]:
    """Seconds to list the manifest folder and read + parse every manifest, 32 at a time."""
    started = time.perf_counter()
    fs, root = fsspec.core.url_to_fs(url, **options)
    folder = f"{root}/_refiner/attempts"
    paths = [p for p in fs.ls(folder, detail=False) if p.endswith(".json")]
    with ThreadPoolExecutor(MANIFEST_READERS) as pool:
        parsed = list(pool.map(lambda p: json.loads(fs.cat_file(p)), paths))
    return time.perf_counter() - started, len(parsed)


@dataclass(frozen=True)
class Case:
    """One size's measurements."""

    shards: int
    write_steps: int
    write_reads: int
    finalize_reads: int
    write_s: float
    finalize_s: list[float]
    baseline_s: list[float]

    @property
    def finalize(self) -> float:
        return statistics.median(self.finalize_s)

    @property
    def baseline(self) -> float:
        return statistics.median(self.baseline_s)


def run_case(shards: int, refiner: rd.RefinerBlobIOManager, repeat: int) -> Case:
    """Materialize the dataset once, then finalize it again ``repeat - 1`` times,
    alternating with the baseline read."""
    os.environ[SHARDS_ENV] = str(shards)
    PROBE.reads.clear()
    asset = rd.build_dataset_asset(scale_pipeline, name=ASSET, max_tasks=64)
    resources = {"refiner": refiner}
    options = refiner.resolved_storage_options()
    with dg.DagsterInstance.ephemeral() as instance:
        started = time.perf_counter()
        result = dg.materialize([asset], instance=instance, resources=resources)
        total = time.perf_counter() - started
        if not result.success:
            raise RuntimeError(f"materializing {shards} shards failed")
        version = refiner.storage().current([ASSET], None)
        assert version is not None and version.summary().shards == shards
        finalize_s = [PROBE.finalize_s]
        write_reads, finalize_reads = PROBE.reads.get("write", 0), PROBE.reads.get("finalize", 0)
        steps = len(PROBE.finalize_args[2])
        baseline_s = []
        spec, plan, written = PROBE.finalize_args
        for i in range(repeat):
            elapsed, read = baseline_read(version.url, options)
            assert read == shards, (read, shards)
            baseline_s.append(elapsed)
            if i == repeat - 1:
                break
            with dg.build_op_context(resources=resources, instance=instance) as context:
                started = time.perf_counter()
                outputs = list(finalize_step(spec, context, plan, written))
                finalize_s.append(time.perf_counter() - started)
            assert outputs, "the finalize op yielded nothing"
    return Case(
        shards,
        steps,
        write_reads,
        finalize_reads,
        total - finalize_s[0],
        finalize_s,
        baseline_s,
    )


def _media(root: str) -> str:
    media = os.path.join(root, "media")
    os.makedirs(media)
    for i in range(MEDIA_FILES):
        with open(os.path.join(media, f"{i:03d}.bin"), "wb") as f:
            f.write(os.urandom(100))
    return media


def _servers(layout: str, latency_s: float) -> tuple[str, str, Callable[[], None]]:
    """moto's endpoint, the proxy's, and how to stop them, laid out as ``layout`` says."""
    if layout == "one-process":
        process, moto_url, proxy_url = start_servers(latency_s)

        def stop() -> None:
            process.stdin.close()
            process.wait(timeout=30)

        return moto_url, proxy_url, stop
    s3 = start_local_s3(latency_s, layout=layout)
    return s3.moto.endpoint_url, s3.endpoint_url, s3.stop


def _storage(
    store: str, root: str, latency_ms: float, layout: str
) -> tuple[Callable[[int], rd.RefinerBlobIOManager], Callable[[], None] | None]:
    """The IO manager of each case (its own base folder), and how to stop the S3 servers."""
    if store == "local":

        def local(shards: int) -> rd.RefinerBlobIOManager:
            return rd.RefinerBlobIOManager(base_url=os.path.join(root, f"out-{shards}"))

        return local, None
    from dagster_aws.s3 import S3Resource

    os.environ.update(dummy_aws_env())
    moto_url, proxy_url, stop = _servers(layout, latency_ms / 1000)
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=moto_url,
        aws_access_key_id=DUMMY_KEY,
        aws_secret_access_key=DUMMY_SECRET,
        region_name=REGION,
    )
    client.create_bucket(Bucket="bench-finalize")
    s3 = S3Resource(
        endpoint_url=proxy_url,
        aws_access_key_id=DUMMY_KEY,
        aws_secret_access_key=DUMMY_SECRET,
        region_name=REGION,
    )

    def remote(shards: int) -> rd.RefinerBlobIOManager:
        return rd.RefinerBlobIOManager(base_url=f"s3://bench-finalize/out-{shards}", s3=s3)

    return remote, stop


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", default="1000,3000,10000", help="sizes, comma-separated")
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument(
        "--servers",
        choices=sorted(LAYOUTS),
        default="processes",
        help="where moto and the proxy run with --store s3 (default: each in its own process)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="parent of the temporary data folder")
    add_json_option(parser)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.shards.split(","))
    _install_probe()
    root = tempfile.mkdtemp(prefix="refiner-bench-finalize-", dir=args.dir)
    stop_servers = None
    cases: list[Case] = []
    load_start = _load()
    try:
        os.environ[MEDIA_ENV] = _media(root)
        storage, stop_servers = _storage(args.store, root, args.latency_ms, args.servers)
        layout = f"; servers: {LAYOUTS[args.servers]}" if args.store == "s3" else ""
        print(f"store={args.store}, {os.cpu_count()} CPUs, load average {load_start}{layout}")
        print(
            "| shards | write steps | manifest reads by write steps | write s | finalize s "
            "(runs) | parallel read s (runs) | ratio |"
        )
        print("|---|---|---|---|---|---|---|")
        for shards in sizes:
            case = run_case(shards, storage(shards), args.repeat)
            cases.append(case)
            runs = ", ".join(f"{t:.2f}" for t in case.finalize_s)
            base_runs = ", ".join(f"{t:.2f}" for t in case.baseline_s)
            print(
                f"| {shards:,} | {case.write_steps} | {case.write_reads:,} "
                f"({case.write_reads / shards:.2f}x) | {case.write_s:.1f} | {case.finalize:.2f} "
                f"({runs}) | {case.baseline:.2f} ({base_runs}) | "
                f"{case.finalize / case.baseline:.2f}x |",
                flush=True,
            )
    finally:
        if stop_servers is not None:
            stop_servers()
        shutil.rmtree(root, ignore_errors=True)
    load_end = _load()
    print(f"load average at the end {load_end}")
    results = report(cases, args.store, args.repeat)
    for result in results:
        met = {True: "met", False: "NOT met", None: "reported"}[result.met]
        print(
            f"{result.case}: {result.refiner_s} against {result.baseline} "
            f"{result.baseline_s}: ratio {result.ratio}"
        )
        print(f"  target {result.target}: {met}")
    extra = {"load": f"{load_start} / {load_end}"}
    if args.store == "s3":
        extra["servers"] = LAYOUTS[args.servers]
    write_results(
        args.json,
        [Result(**{**r.__dict__, "extra": {**r.extra, **extra}}) for r in results],
    )


def report(cases: list[Case], store: str, repeat: int) -> list[Result]:
    """The records: reads and finalize per size, the growth exponent, the S3 10k target."""
    where = "local disk" if store == "local" else "moto S3 +20 ms"
    results = []
    for case in cases:
        results.append(
            Result(
                workload="finalize_scale",
                case=f"{where}: manifest reads by 64 write steps, {case.shards:,} shards",
                refiner_s=float(case.write_reads),
                baseline="shards",
                baseline_s=float(case.shards),
                target="<= 1.1x",
                met=case.write_reads <= 1.1 * case.shards,
                repeats=1,
                ratio=round(case.write_reads / case.shards, 3),
                ratio_kind="fraction",
            )
        )
        results.append(
            Result(
                workload="finalize_scale",
                case=f"{where}: finalize step, {case.shards:,} shards",
                refiner_s=round(case.finalize, 3),
                baseline="parallel read of every manifest (32 threads)",
                baseline_s=round(case.baseline, 3),
                target="<= 3x",
                met=case.finalize <= 3 * case.baseline,
                repeats=repeat,
                extra={"finalize_reads": case.finalize_reads, "write_s": round(case.write_s, 1)},
            )
        )
    if len(cases) >= 2:
        small, large = cases[0], cases[-1]
        exponent = math.log(large.finalize / small.finalize) / math.log(large.shards / small.shards)
        results.append(
            Result(
                workload="finalize_scale",
                case=f"{where}: finalize growth, {small.shards:,} -> {large.shards:,} shards",
                refiner_s=round(exponent, 3),
                baseline="linear",
                baseline_s=1.0,
                target="<= 1.1",
                met=exponent <= 1.1,
                repeats=repeat,
                ratio=round(exponent, 3),
                ratio_kind="value",
            )
        )
    if store == "s3" and cases:
        at = {c.shards: c.finalize for c in cases}
        if 10_000 in at:
            value, how = at[10_000], "measured"
        else:
            last = cases[-1]
            exponent = 1.0
            if len(cases) >= 2:
                prev = cases[-2]
                exponent = math.log(last.finalize / prev.finalize) / math.log(
                    last.shards / prev.shards
                )
            value = last.finalize * (10_000 / last.shards) ** max(exponent, 1.0)
            how = f"extrapolated from {last.shards:,} with exponent {max(exponent, 1.0):.2f}"
        results.append(
            Result(
                workload="finalize_scale",
                case=f"{where}: finalize step at 10,000 shards ({how})",
                refiner_s=round(value, 2),
                baseline="target",
                baseline_s=60.0,
                target="<= 60 s",
                met=value <= 60.0,
                repeats=repeat,
                ratio=round(value / 60.0, 3),
                ratio_kind="fraction",
            )
        )
    return results


if __name__ == "__main__":
    main()
