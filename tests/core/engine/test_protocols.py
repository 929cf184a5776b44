"""Source, Sink, AttemptWriter and the stage protocols: the existing classes conform,
and a new sink is one class plus one registration."""

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
from refiner_core.sinks import SINKS, AttemptWriter, FinalizeStage, Sink
from refiner_core.sinks.files import FileAttemptWriter, FileSink, FolderSink
from refiner_core.sinks.jsonl import JsonlSink
from refiner_core.sinks.lance import LanceAttemptWriter, LanceFinalizeStage, LanceSink
from refiner_core.sinks.parquet import ParquetSink
from refiner_core.sources import ItemsSource, JsonlSource, ParquetSource, Source
from refiner_core.sources.lance import LanceSource

CONFORMING = [
    (Source, [ItemsSource, JsonlSource, ParquetSource, LanceSource]),
    (Sink, [ParquetSink, JsonlSink, LanceSink]),
    (AttemptWriter, [FileAttemptWriter, LanceAttemptWriter]),
    (ShardStage, [ShardedStage, WriteStage]),
    (ReduceStage, [FinalizeStage, LanceFinalizeStage]),
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
    assert 1 <= len(methods) <= 4, f"{protocol.__name__} has {len(methods)} methods"
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
    return {name for name in ("folder", "assets", "name") if f"self.{name} =" in source}


def test_instances_pass_runtime_checks(tmp_path):
    sequence = mdr.from_items([{"x": 1}]).write_lance(str(tmp_path / "x.lance"))
    write, finalize = sequence.stages
    assert isinstance(write, ShardStage) and isinstance(finalize, ReduceStage)
    assert isinstance(write.sink, Sink)
    assert isinstance(write.pipeline.source, Source)


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
