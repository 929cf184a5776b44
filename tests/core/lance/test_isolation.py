"""Lance is not fork-safe: the process that launches runs must never start Lance itself."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from refiner_core.lance.isolation import (
    call_forked,
    call_isolated,
    isolating,
    iter_isolated,
)

ROOT = Path(__file__).resolve().parents[3]


def _tables(n: int):
    for i in range(n):
        yield pa.table({"i": [i] * (i + 1)})


def _fail():
    raise KeyError("from the child")


def test_call_and_iter_isolated() -> None:
    assert isolating()
    assert call_isolated(divmod, 7, 2) == (3, 1)
    with pytest.raises(KeyError, match="from the child"):
        call_isolated(_fail)
    assert call_isolated(lambda: 5) == 5  # not picklable: runs in a child forked for it
    assert [t.num_rows for t in iter_isolated(_tables, 4)] == [1, 2, 3, 4]
    stream = iter_isolated(_tables, 1000)
    assert next(stream).num_rows == 1
    stream.close()  # stops the child early


def _dies_after_one_table():
    yield pa.table({"i": [1]})
    os._exit(3)


def test_iter_isolated_reports_a_child_that_died_mid_stream() -> None:
    with pytest.raises(RuntimeError, match="ended before its last table"):
        list(iter_isolated(_dies_after_one_table))  # not a silently shorter stream


def test_call_forked_runs_in_a_child_of_its_own() -> None:
    parent = os.getpid()
    assert call_forked(lambda: os.getpid()) != parent
    assert call_forked(lambda: os.getppid()) == parent
    with pytest.raises(KeyError, match="from the child"):
        call_forked(_fail)


def test_launching_process_never_starts_lance(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        import refiner_core as mdr
        from tests.core.lance.helpers import lance_in_this_process, run_manually
        out = {str(tmp_path / "ds.lance")!r}
        rows = [{{"id": i}} for i in range(30)]
        mdr.from_items(rows, items_per_shard=10).write_lance(out).launch_local(num_workers=2)
        for _ in range(3):
            seq = mdr.read_lance(out).write_lance(out, mode="append")
            seq.launch_local(num_workers=2)
        seq = mdr.from_items(rows).write_lance(out, mode="append")
        run_manually(seq, "runaaaaaaaaa")  # attempts written in this very process
        seq.stages[-1].run(run_id="runaaaaaaaaa")
        n = len(mdr.read_lance(out).materialize())
        print(n, lance_in_this_process())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == [str(30 * 8 + 30), "False"]


def _run_script(body: str) -> list[str]:
    script = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n" + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_default_start_method_is_spawn_once_lance_ran_in_the_launching_process(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ds.lance"
    words = _run_script(
        f"""
        import threading
        import refiner_core as mdr
        from refiner_core.execution.start_methods import resolve_start_method
        from refiner_core.lance.isolation import call_lance_here
        from tests.core.lance.helpers import lance_in_this_process

        def report(when):
            print(when, resolve_start_method(None), lance_in_this_process())

        out = {str(out)!r}
        rows = [{{"id": i}} for i in range(20)]
        report("fresh")
        mdr.from_items(rows, items_per_shard=10).write_lance(out).launch_local(num_workers=2)
        print(len(mdr.read_lance(out).materialize()))
        report("isolated")  # Lance ran in helper processes, not here
        call_lance_here()  # as a worker started fresh does
        mdr.from_items(rows, items_per_shard=10).write_lance(out, mode="append").launch_local(
            num_workers=2
        )
        print(len(mdr.read_lance(out).materialize()))
        report("in-process")

        lock = threading.Lock()  # travels to forked workers only: spawn cannot pickle it
        locked = mdr.from_items([{{"i": 1}}]).map(lambda row: {{"held": lock.locked()}})
        try:
            locked.write_parquet(out + ".default").launch_local()
        except TypeError as exc:
            print("default-raises", "start_method='spawn'" in str(exc))
        done = locked.write_parquet(out + ".fork").launch_local(start_method="fork")
        print("fork-rows", done.summary.counters["rows_written"])
        """
    )
    assert words == [
        *("fresh", "fork", "False"),
        "20",
        *("isolated", "fork", "False"),
        "40",
        *("in-process", "spawn", "True"),
        *("default-raises", "True"),
        *("fork-rows", "1"),
    ]


def test_default_start_method_is_spawn_once_a_lance_helper_died() -> None:
    words = _run_script(
        """
        import os, warnings
        from refiner_core.execution.start_methods import resolve_start_method
        from refiner_core.lance.isolation import call_isolated

        def dies_in_another_process(home):
            if os.getpid() != home:
                os._exit(1)
            return "here"

        print(resolve_start_method(None))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print(call_isolated(dies_in_another_process, os.getpid()))
        print(any("died without an answer" in str(w.message) for w in caught))
        print(resolve_start_method(None), resolve_start_method("fork"))
        """
    )
    assert words == ["fork", "here", "True", "spawn", "fork"]
