"""The benchmark suite's scripts: which workloads each measures, with which arguments.

``bench/run_all.py`` runs them; ``--only`` chooses by workload::

    from bench.jobs import JOBS, WORKLOADS
    print([job.name for job in JOBS if "append" in job.workloads])
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    """One script run: which workloads it measures, its full and quick arguments."""

    name: str
    script: str
    workloads: tuple[str, ...]
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    repeat_flag: str = "--repeat"
    peer: bool = False  # takes --peer / --no-peer
    timeout_s: float = 1800
    default: bool = True  # run without --only


JOBS = (
    Job(
        "assets",
        "bench_assets.py",
        ("pack", "copy", "repack"),
        # 5 repeats: this disk's times swing most here (see bench_assets.SETTLE_S)
        full=("--files", "16000", "--rss-gib", "0", "--repeat-min", "5"),
        quick=("--files", "400", "--rss-gib", "0"),
        peer=True,
        timeout_s=3600,
    ),
    Job(
        "rss",
        "bench_assets.py",
        ("rss",),
        full=("--skip-speed", "--rss-gib", "4"),
        quick=("--skip-speed", "--rss-gib", "0.25"),
    ),
    Job("blob_reads", "bench_blob_reads.py", ("coalesced_reads",), quick=("--references", "200")),
    Job(  # a serial verify of 1,000 shards at 20 ms a request takes minutes per repeat
        "audit",
        "bench_audit.py",
        ("audit",),
        full=("--shards", "1000"),
        quick=("--shards", "50", "--local-rows", "2000"),
        timeout_s=3600,
    ),
    Job(
        "map_async",
        "bench_map_async.py",
        ("map_async", "batch_map_async"),
        quick=("--rows", "500", "--noop-rows", "20000", "--batch-rows", "2000"),
        peer=True,
    ),
    Job(
        "s3_upload",
        "bench_s3_upload.py",
        ("s3_upload",),
        quick=("--size-mib", "64", "--compare-mib", "32"),
    ),
    Job(
        "s3_assets",
        "bench_s3_assets.py",
        ("s3_assets",),
        full=("--no-repack",),
        quick=("--files", "200", "--no-repack"),
    ),
    Job(  # the re-pack on S3 at the pack workload's 16,000 files (about 12 minutes)
        "s3_repack",
        "bench_s3_assets.py",
        ("repack",),
        full=("--files", "16000", "--no-file-mode"),
        quick=("--files", "200", "--no-file-mode"),
        timeout_s=3600,
    ),
    Job(
        "generate_text",
        "bench_inference.py",
        ("generate_text",),
        quick=("--requests", "400"),
        repeat_flag="--runs",
    ),
    Job(
        "http_clients",
        "bench_http_clients.py",
        ("inference_transport",),
        full=("--budget", "15"),
        quick=("--latencies", "0.5", "--in-flight", "64", "--budget", "5", "--no-reference"),
        repeat_flag="--repeats",
        default=False,  # about 30 minutes: the measurement behind keeping http1.py
    ),
    Job("dagster", "bench_dagster.py", ("dagster",), quick=("--files", "200")),
    Job("fanout", "bench_fanout.py", ("dagster", "planning"), quick=("--rows", "200")),
    Job("planning", "bench_plan.py", ("planning",)),
    Job(  # on moto S3 behind 20 ms, where a rewrite's uploads cost what they cost in production
        "append",
        "bench_append.py",
        ("append",),
        full=("--s3",),
        quick=("--files", "1000"),
    ),
    Job("lance_append", "bench_lance_append.py", ("lance_append",), quick=("--rows", "2000")),
    Job("import", "bench_import.py", ("import",), full=("--repeat-min", "7")),
    Job(
        "lerobot_merge",
        "bench_lerobot_merge.py",
        ("lerobot_merge",),
        quick=(
            *("--episodes", "4", "--seconds", "2", "--width", "160", "--height", "120"),
            "--no-lerobot",
        ),
        timeout_s=3600,  # LeRobot's own build of 10 episodes takes minutes
    ),
    Job("read_clip", "bench_read_clip.py", ("read_clip",), quick=("--size-mib", "8")),
    Job(  # the resolution LeRobot datasets typically have
        "verify_video",
        "bench_verify_video.py",
        ("verify_video",),
        full=("--episodes", "20", "--width", "640", "--height", "480"),
        quick=("--episodes", "2", "--seconds", "2", "--width", "320", "--height", "240"),
    ),
    Job(  # a small one: decoding is cheap there, so the ratio is lower
        "verify_video_small",
        "bench_verify_video.py",
        ("verify_video",),
        quick=("--episodes", "2", "--seconds", "2"),
    ),
    Job(  # starts busy loops of its own, so only when asked for
        "busy_workers",
        "bench_busy_workers.py",
        ("busy_workers",),
        quick=("--files", "400", "--warm-s", "5"),
        default=False,
    ),
)
WORKLOADS = sorted({w for job in JOBS for w in job.workloads} | {"peer"})

DEFAULT_WORKLOADS = sorted({w for job in JOBS if job.default for w in job.workloads} | {"peer"})
