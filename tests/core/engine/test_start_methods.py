"""Pipelines that travel: cloudpickle round trips, and workers started by fork,
forkserver or spawn with every source, sink and asset mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.execution.start_methods import resolve_start_method

from .helpers import data_files

START_METHODS = ["fork", "forkserver", "spawn"]
pytestmark = pytest.mark.usefixtures("fresh_forkserver")


def local_pipeline(offset: int) -> mdr.Pipeline:
    """A pipeline of a lambda, a closure, a local factory and a local class: nothing
    in it can be imported by name."""

    class Labeller:
        def __init__(self, prefix: str) -> None:
            self.prefix = prefix

        async def __call__(self, row):
            return {"label": f"{self.prefix}-{row.doubled}"}

    def make_labeller():
        return Labeller(prefix=f"p{offset}")

    def ranked(rows):
        return [row.update(rank=k) for k, row in enumerate(rows)]

    return (
        mdr.from_items([{"i": i} for i in range(30)], items_per_shard=10)
        .map(lambda row: {"doubled": 2 * row.i + offset})
        .map_async(factory=make_labeller, max_in_flight=4)
        .batch_map(ranked, batch_size=4)
        .filter(lambda row: row.i % 7 != 3)
    )


def run_in_fresh_python(data: bytes, code: str, cwd) -> str:
    """Run ``code`` in a new interpreter, started away from the repository (so nothing
    of the tests can be imported), with ``data`` as its standard input."""
    return subprocess.run(
        [sys.executable, "-c", code],
        input=data,
        cwd=cwd,
        capture_output=True,
        timeout=180,
        check=True,
    ).stdout.decode()


def test_a_pipeline_of_lambdas_and_local_factories_round_trips_through_cloudpickle(tmp_path):
    pipeline = local_pipeline(offset=5)
    expected = [row.to_dict() for row in pipeline.materialize()]
    assert len(expected) == 26
    code = (
        "import sys, json, cloudpickle\n"
        "pipeline = cloudpickle.loads(sys.stdin.buffer.read())\n"
        "print(json.dumps([row.to_dict() for row in pipeline.materialize()]))\n"
    )
    out = run_in_fresh_python(cloudpickle.dumps(pipeline), code, cwd=tmp_path)
    assert json.loads(out) == expected


def test_a_sequence_round_trips_through_cloudpickle_and_runs_elsewhere(tmp_path):
    out = tmp_path / "out"
    sequence = local_pipeline(offset=1).write_parquet(str(out))
    code = (
        "import sys, cloudpickle\n"
        "sequence = cloudpickle.loads(sys.stdin.buffer.read())\n"
        "print(sequence.launch_local(num_workers=2).summary.rows_written)\n"
    )
    assert run_in_fresh_python(cloudpickle.dumps(sequence), code, cwd=tmp_path).strip() == "26"
    rows = sorted(
        (r for p in data_files(out) for r in pq.read_table(p).to_pylist()), key=lambda r: r["i"]
    )
    expected = sorted(
        (r.to_dict() for r in local_pipeline(offset=1).materialize()), key=lambda r: r["i"]
    )
    assert rows == expected


def media_index(tmp_path, count: int = 12) -> tuple[str, list[bytes]]:
    """``count`` small media files and a one-row-group Parquet index of them."""
    folder = tmp_path / "media"
    folder.mkdir()
    payloads = [bytes([i]) * (100 + i) for i in range(count)]
    for i, data in enumerate(payloads):
        (folder / f"clip-{i}.bin").write_bytes(data)
    index = tmp_path / "index.parquet"
    pq.write_table(
        pa.table(
            {"i": list(range(count)), "clip": [str(folder / f"clip-{i}.bin") for i in range(count)]}
        ),
        index,
    )
    return str(index), payloads


@pytest.mark.parametrize("start_method", START_METHODS)
def test_parquet_to_parquet_with_packed_blobs_on_two_workers(tmp_path, start_method):
    index, payloads = media_index(tmp_path)
    pipeline = mdr.read_parquet(index, dtypes={"clip": mdr.datatype.file_path()}).map(
        lambda row: {"pid": os.getpid()}
    )
    out = tmp_path / "out"
    stats = pipeline.write_parquet(str(out), assets=mdr.BlobAssetConfig()).launch_local(
        num_workers=2, start_method=start_method
    )
    assert stats.stages[0].shards == 8  # asset rows: four shards per worker
    rows = mdr.read_parquet(str(out)).materialize()
    assert sorted(r.i for r in rows) == list(range(12))
    assert all(mdr.read_blob(r.clip) == payloads[r.i] for r in rows)
    pids = {r.pid for r in rows}
    assert len(pids) == 2 and os.getpid() not in pids


@pytest.mark.parametrize("start_method", START_METHODS)
def test_jsonl_to_jsonl_with_copied_files_and_a_map_async_factory(tmp_path, start_method):
    _, payloads = media_index(tmp_path, count=6)
    lines = [{"i": i, "clip": str(tmp_path / "media" / f"clip-{i}.bin")} for i in range(6)]
    source = tmp_path / "index.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    suffix = f"-{start_method}"

    def make_tagger():
        async def tag(row):
            return {"tag": f"{row.i}{suffix}"}

        return tag

    out = tmp_path / "out"
    pipeline = mdr.read_jsonl(str(source), dtypes={"clip": mdr.datatype.file_path()})
    pipeline.map_async(factory=make_tagger).write_jsonl(
        str(out), assets=mdr.FileAssetConfig()
    ).launch_local(start_method=start_method)
    rows = mdr.read_jsonl(str(out)).materialize()
    assert sorted(r.tag for r in rows) == sorted(f"{i}{suffix}" for i in range(6))
    for row in rows:
        assert row.clip.startswith(str(out / "assets"))
        with open(row.clip, "rb") as f:
            assert f.read() == payloads[row.i]


@pytest.mark.parametrize("start_method", START_METHODS)
def test_lance_to_lance_and_items_through_fresh_workers(tmp_path, start_method):
    first = str(tmp_path / "first.lance")
    mdr.from_items([{"i": i} for i in range(20)], items_per_shard=5).map(
        lambda row: {"square": row.i * row.i}
    ).write_lance(first).launch_local(num_workers=2, start_method=start_method)
    second = str(tmp_path / "second.lance")
    mdr.read_lance(first, num_shards=3).batch_map(
        lambda rows: [r.update(half=r.square // 2) for r in rows], batch_size=3
    ).write_lance(second).launch_local(num_workers=2, start_method=start_method)
    rows = sorted(mdr.read_lance(second).materialize(), key=lambda r: r.i)
    assert [(r.i, r.square, r.half) for r in rows] == [(i, i * i, i * i // 2) for i in range(20)]


def test_a_pipeline_that_cannot_be_pickled_fails_before_any_worker_starts(tmp_path):
    lock = threading.Lock()

    def locked(row):
        with lock:
            return {"x": row.i}

    out = tmp_path / "out"
    sequence = mdr.from_items([{"i": 1}]).map(locked).write_parquet(str(out))
    with pytest.raises(TypeError, match=r"start_method='spawn'.*cannot be sent.*factory="):
        sequence.launch_local(start_method="spawn")
    assert not data_files(out)
    # fork does not pickle: the same pipeline runs
    assert sequence.launch_local(start_method="fork").summary.counters["rows_written"] == 1


def test_start_method_is_checked_and_fork_stays_the_default():
    assert resolve_start_method(None) == "fork"
    with pytest.raises(
        ValueError, match=r"start_method='threads'.*\('fork', 'forkserver', 'spawn'\)"
    ):
        mdr.from_items([{"i": 1}]).launch_local(start_method="threads")


@pytest.mark.parametrize("start_method", START_METHODS)
def test_workers_see_the_environment_of_the_launch(tmp_path, monkeypatch, start_method):
    pipeline = mdr.from_items([{"i": 1}]).map(
        lambda row: {"region": os.environ.get("REFINER_TEST_REGION")}
    )
    monkeypatch.setenv("REFINER_TEST_REGION", "first")
    out = tmp_path / "first"
    pipeline.write_parquet(str(out)).launch_local(start_method=start_method)
    # set after the first launch, when the fork server (if any) was already running
    monkeypatch.setenv("REFINER_TEST_REGION", "second")
    again = tmp_path / "second"
    pipeline.write_parquet(str(again)).launch_local(start_method=start_method)
    regions = [pq.read_table(data_files(o)[0]).column("region")[0].as_py() for o in (out, again)]
    assert regions == ["first", "second"]


def test_forked_workers_inherit_pyarrows_pandas_check(tmp_path):
    """pyarrow imports pandas (when installed) on its first conversion of a Python list
    in a process; the launcher does it before forking, so no worker pays for it."""
    import pandas  # noqa: F401  (a test dependency: the check is about its import)

    script = tmp_path / "check.py"
    script.write_text(
        "import sys\n"
        "import refiner_core as mdr\n"
        "assert 'pandas' not in sys.modules\n"
        "seen = (\n"
        "    mdr.from_items([{'i': 1}])\n"
        "    .map(lambda row: {**row, 'already': 'pandas' in sys.modules})\n"
        "    .write_jsonl(sys.argv[1])\n"
        "    .launch_local(num_workers=1, start_method='fork')\n"
        ")\n"
    )
    out = tmp_path / "out"
    subprocess.run([sys.executable, str(script), str(out)], check=True, timeout=120)
    (data,) = data_files(out, ".jsonl")
    assert [json.loads(line)["already"] for line in data.read_text().splitlines()] == [True]
