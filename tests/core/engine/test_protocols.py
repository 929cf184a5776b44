"""Source, Sink, AttemptWriter and the stage protocols: the existing classes conform,
the contract carries everything finalization calls, stages are dispatched by type, and
a new sink is one class plus one registration."""

from __future__ import annotations

import inspect
import json
import typing

import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

import refiner_core as mdr
from refiner_core.execution.protocols import ReduceStage, ShardStage
from refiner_core.execution.stages import ShardedStage, WriteStage
from refiner_core.manifests import AttemptResult
from refiner_core.sinks import SINKS, AttemptWriter, FinalizeStage, Sink, finalize_output
from refiner_core.sinks.files import FileAttemptWriter, FileSink, FolderSink
from refiner_core.sinks.jsonl import JsonlSink
from refiner_core.sinks.lance import LanceAttemptWriter, LanceSink
from refiner_core.sinks.lerobot import LeRobotSink
from refiner_core.sinks.lerobot.attempt import LeRobotAttemptWriter
from refiner_core.sinks.parquet import ParquetSink
from refiner_core.sources import ItemsSource, JsonlSource, ParquetSource, Source
from refiner_core.sources.lance import LanceSource

CONFORMING = [
    (Source, [ItemsSource, JsonlSource, ParquetSource, LanceSource]),
    (Sink, [ParquetSink, JsonlSink, LanceSink, LeRobotSink]),
    (AttemptWriter, [FileAttemptWriter, LanceAttemptWriter, LeRobotAttemptWriter]),
    (ShardStage, [ShardedStage, WriteStage]),
    (ReduceStage, [FinalizeStage]),
]


def protocol_methods(protocol: type) -> list[str]:
    return [
        name
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and not name.startswith("_")
    ]


def parameters(function) -> list[tuple[str, inspect._ParameterKind, bool]]:
    """Names, kinds and whether each has a default; annotations left out."""
    return [
        (p.name, p.kind, p.default is not inspect.Parameter.empty)
        for p in inspect.signature(function).parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]


@pytest.mark.parametrize(
    ("protocol", "cls"),
    [(protocol, cls) for protocol, classes in CONFORMING for cls in classes],
    ids=lambda x: x.__name__,
)
def test_existing_classes_conform_to_their_protocol(protocol, cls):
    methods = protocol_methods(protocol)
    for name in methods:
        implemented = getattr(cls, name, None)
        assert callable(implemented), f"{cls.__name__} lacks {name}()"
        assert parameters(implemented) == parameters(getattr(protocol, name)), (
            f"{cls.__name__}.{name}{inspect.signature(implemented)} does not match "
            f"{protocol.__name__}.{name}{inspect.signature(getattr(protocol, name))}"
        )
        wants_async = inspect.iscoroutinefunction(getattr(protocol, name))
        assert inspect.iscoroutinefunction(implemented) == wants_async, f"{cls.__name__}.{name}"
    for attribute in typing.get_type_hints(protocol):
        assert hasattr(cls, attribute) or attribute in _instance_attributes(cls), (
            f"{cls.__name__} has no {attribute}"
        )


def _instance_attributes(cls: type) -> set[str]:
    source = "".join(
        inspect.getsource(c) for c in cls.__mro__ if c.__module__.startswith("refiner")
    )
    names = ("folder", "assets", "name", "empty_schema")
    return {name for name in names if f"self.{name} =" in source}


def test_the_sink_contract_has_what_finalization_calls():
    """Finalization and the write stage call nothing a sink does not declare."""
    declared = set(protocol_methods(Sink)) | set(typing.get_type_hints(Sink))
    assert {
        "commit",
        "write_empty_result",
        "remove_leftovers",
        "exclusive_owner",
        "open_attempt",
    } <= declared
    hints = typing.get_type_hints(AttemptWriter.close)
    assert hints["return"] is AttemptResult


async def _written(sink, rows):
    writer = sink.open_attempt("00000", "0123456789ab", "0123456789ab")
    await writer.write(pa.table(rows))
    return await writer.close()


def test_attempt_writers_return_a_typed_result_that_becomes_the_manifest(tmp_path):
    import asyncio

    result = asyncio.run(_written(ParquetSink(str(tmp_path)), {"x": [1, 2]}))
    assert isinstance(result, AttemptResult)
    assert result.files == ("00000__0123456789ab.parquet",)
    manifest = result.manifest(
        run_id="0123456789ab",
        shard_id="00000",
        attempt_id="0123456789ab",
        started_at=1.0,
        rows_read=2,
    )
    assert manifest.files == result.files
    assert manifest.counters["rows_written"] == 2 and manifest.counters["rows_read"] == 2


def test_stages_are_dispatched_by_type_not_by_their_label(tmp_path):
    """A reduce stage runs as one whatever its ``kind`` label says."""
    out = tmp_path / "out"
    sequence = mdr.from_items([{"x": 1}, {"x": 2}]).write_parquet(str(out))
    relabelled = FinalizeStage(sequence.write_stage.sink)
    relabelled.kind = "reduce"
    sequence.stages[1] = relabelled
    stats = sequence.launch_local(num_workers=1, rundir=str(tmp_path / "run"))
    assert stats.summary.rows_written == 2
    assert sequence.finalize_stages == [relabelled]


def test_finalizing_an_output_needs_no_pipeline(tmp_path):
    """A written output is finalized from its format and settings alone."""
    out = str(tmp_path / "out")
    assets = mdr.FileAssetConfig(subdir="media")
    media = tmp_path / "frame.bin"
    media.write_bytes(b"frame")
    rows = [{"i": i, "frame": str(media)} for i in range(3)]
    pipeline = mdr.from_items(rows, items_per_shard=2, dtypes={"frame": mdr.datatype.file_path()})
    write = pipeline.write_jsonl(
        out, assets=assets, filename_template="part-{shard}-{attempt}.jsonl"
    )
    stage = write.write_stage
    shards = stage.plan("0123456789ab")
    stage.run_task(shards, run_id="0123456789ab")
    # a second, losing attempt of shard 0 that finalization must delete
    stage.run_task(shards[:1], run_id="0123456789ab", attempt_id="ffffffffffff")
    summary = finalize_output(
        "jsonl",
        out,
        "0123456789ab",
        assets=assets,
        filename_template="part-{shard}-{attempt}.jsonl",
    )
    assert summary.rows_written == 3 and summary.shards == 2
    assert summary.rejected_attempts_removed == 1
    assert summary.asset_subdir == "media" and summary.asset_mode == "files"
    on_disk = sorted(p.name for p in (tmp_path / "out").glob("*.jsonl"))
    assert on_disk == sorted(summary.files)
    assert not any("ffffffffffff" in p.name for p in (tmp_path / "out" / "media").iterdir())
    assert sorted(r["i"] for r in mdr.read_jsonl(out).take(10)) == [0, 1, 2]


def test_instances_pass_runtime_checks(tmp_path):
    sequence = mdr.from_items([{"x": 1}]).write_lance(str(tmp_path / "x.lance"))
    write, finalize = sequence.stages
    assert isinstance(write, ShardStage) and isinstance(finalize, ReduceStage)
    assert isinstance(write.sink, Sink)
    assert isinstance(write.pipeline.source, Source)
    assert isinstance(LeRobotSink(str(tmp_path / "robot"), fps=10), Sink)


def test_lance_sink_has_no_filename_template_to_reject():
    assert not issubclass(LanceSink, FileSink)
    assert issubclass(LanceSink, FolderSink)
    assert "filename_template" not in inspect.signature(LanceSink).parameters
    assert not hasattr(LanceSink("/tmp/never-written.lance"), "template")


class CsvSink(FileSink):
    """A whole new output format: a table-file sink and its writer."""

    format = "csv"
    extension = "csv"

    def open_table_writer(self, file, schema: pa.Schema):
        return pa_csv.CSVWriter(file, schema)


def test_a_new_sink_is_one_class_and_one_registration(tmp_path, monkeypatch):
    monkeypatch.setitem(SINKS, "csv", lambda: CsvSink)
    out = tmp_path / "out"
    rows = [{"episode": i, "frames": 10 * i} for i in range(5)]
    stats = mdr.from_items(rows, items_per_shard=2).write("csv", str(out)).launch_local()
    assert stats.summary.format == "csv" and stats.summary.rows_written == 5
    written = sorted(out.glob("*.csv"))
    assert [p.name for p in written] == sorted(stats.summary.files)
    read = pa.concat_tables(pa_csv.read_csv(p) for p in written).sort_by("episode")
    assert read.to_pylist() == rows
    layout = json.loads((out / "_refiner" / "layout.json").read_text())
    assert layout["format"] == "csv"
