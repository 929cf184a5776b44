"""``dtypes=`` naming a column that never reaches the writer is an error, as early as
the columns are known; declarations of columns a step adds stay legitimate."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr

from .helpers import data_files, read_output_rows

INT = mdr.datatype.int32()


@pytest.fixture
def table(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"episode": [1, 2, 3], "label": ["a", "b", "c"]}), path)
    return str(path)


def test_source_dtypes_naming_a_missing_column_fail_at_plan_time(table):
    for pipeline in (
        mdr.read_parquet(table, dtypes={"lable": mdr.datatype.string()}),
        mdr.read_parquet(table, dtypes={"lable": mdr.datatype.string()}).filter(bool),
    ):
        with pytest.raises(ValueError) as caught:
            pipeline.plan()
        message = str(caught.value)
        assert "declares column 'lable'" in message
        assert "Did you mean 'label'?" in message
        assert "['episode', 'label']" in message


def test_a_projected_away_column_cannot_be_declared(table):
    pipeline = mdr.read_parquet(table, columns=["episode"], dtypes={"label": INT})
    with pytest.raises(ValueError, match=r"column 'label'.*source's columns \['episode'\]"):
        pipeline.plan()


def test_write_of_a_misspelt_source_declaration_fails_before_writing(tmp_path, table):
    out = tmp_path / "out"
    seq = mdr.read_parquet(table, dtypes={"episod": INT}).write_parquet(str(out))
    # planning the write stage refuses it: no shard has run
    with pytest.raises(ValueError, match="planning.*declares column 'episod'.*'episode'"):
        seq.launch_local()
    assert data_files(out) == []


@pytest.mark.parametrize("writer", ["write_parquet", "write_jsonl", "write_lance"])
def test_step_dtypes_naming_a_column_no_row_has_fail_the_shard(tmp_path, writer):
    out = tmp_path / "out"
    pipeline = mdr.from_items([{"episode": i} for i in range(4)], items_per_shard=2).map(
        lambda r: {"score": r.episode / 2}, dtypes={"scroe": mdr.datatype.float32()}
    )
    seq = getattr(pipeline, writer)(str(out))
    with pytest.raises(mdr.StageFailed) as caught:
        seq.launch_local()
    message = str(caught.value)
    assert "dtypes= of step 0 (map) declares column 'scroe'" in message
    assert "['episode', 'score']" in message and "Did you mean 'score'?" in message
    assert "shard 0000" in message
    assert [p for p in out.rglob("*") if p.is_file() and "_refiner" not in p.parts] == []


def test_items_dtypes_naming_a_missing_column_fail_the_write(tmp_path):
    out = tmp_path / "out"
    seq = mdr.from_items([{"n": 1}], dtypes={"m": INT}).write_parquet(str(out))
    with pytest.raises(mdr.StageFailed, match=r"declares column 'm'.*\['n'\]"):
        seq.launch_local()
    assert data_files(out) == []


def test_declaring_a_column_a_step_adds_is_legitimate(tmp_path, table):
    out = tmp_path / "out"
    # declared on the source, created by the map: it reaches the writer typed
    pipeline = mdr.read_parquet(table, dtypes={"frames": mdr.datatype.int8()}).map(
        lambda r: {"frames": r.episode * 10}
    )
    # set on only some rows of a block: the others hold None, the column still arrives
    pipeline = pipeline.map(
        lambda r: {"note": "odd"} if r.episode % 2 else {}, dtypes={"note": mdr.datatype.string()}
    )
    pipeline.write_parquet(str(out)).launch_local()
    schema = pq.read_schema(data_files(out)[0])
    assert schema.field("frames").type == pa.int8()
    assert [(r["frames"], r["note"]) for r in read_output_rows(out)] == [
        (10, "odd"),
        (20, None),
        (30, "odd"),
    ]


def test_a_shard_with_no_rows_is_not_judged(tmp_path):
    out = tmp_path / "out"
    pipeline = mdr.from_items([{"n": 1}], dtypes={"later": INT}).filter(lambda r: False)
    stats = pipeline.write_parquet(str(out)).launch_local()
    assert stats.summary.counters["rows_written"] == 0
