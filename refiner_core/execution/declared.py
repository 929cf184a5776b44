"""Declared columns must reach the writer: a ``dtypes=`` entry naming no column is an error.

A type declared with ``dtypes=`` (on the source or on any step) only shapes the
columns a writer writes, so an entry naming a column that never arrives there does
nothing: it is a misspelt or stale name. The rule, checked as early as the columns
are known:

- at plan time, when every step only filters (so the rows carry exactly the
  source's columns) and the source knows its schema (Parquet, Lance): each declared
  column must be a source column;
- otherwise, for a write, when a shard's first rows reach the writer: each declared
  column must be among them. Those columns are the attempt's columns (later rows are
  made to match them), so a column a step adds must be set on every row, ``None``
  where it has no value. A shard that writes no rows is not checked.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

_SHOWN_COLUMNS = 20


def declarations(pipeline: Any) -> dict[str, str]:
    """Each declared column and where it was declared last (``"read_parquet"``,
    ``"step 1 (map)"``)."""
    origins = dict.fromkeys(getattr(pipeline.source, "fields", {}) or {}, pipeline.source.name)
    for step in pipeline.steps:
        origins.update(dict.fromkeys(step.fields, f"step {step.index} ({step.kind})"))
    return origins


def only_filters(pipeline: Any) -> bool:
    """Whether the rows keep the source's columns: every step only drops rows."""
    return all(step.kind == "filter" for step in pipeline.steps)


def check_against_source(pipeline: Any) -> None:
    """At plan time: refuse declarations of columns the source lacks, when no step can
    add columns and the source knows its schema; otherwise leave it to the writer."""
    if not only_filters(pipeline):
        return
    schema = pipeline.source.schema_hint()
    if schema is None:
        return
    check_declared(
        declarations(pipeline),
        schema.names,
        where=f"{pipeline.source.name} (planning)",
        present_as="the source's columns",
    )


def check_declared(
    origins: dict[str, str], columns: Iterable[str], *, where: str, present_as: str
) -> None:
    """Raise ``ValueError`` naming the first declared column missing from ``columns``,
    the names nearest to it, and the fix."""
    present = list(columns)
    have = set(present)
    for name, origin in origins.items():
        if name in have:
            continue
        near = difflib.get_close_matches(name, present, n=3)
        guess = f" Did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
        shown = present[:_SHOWN_COLUMNS] + (["..."] if len(present) > _SHOWN_COLUMNS else [])
        raise ValueError(
            f"{where}: dtypes= of {origin} declares column {name!r}, which is not among "
            f"{present_as} {shown}.{guess} A declared column must reach the writer: a "
            "source column, or one a step sets on every row (None where it has no value). "
            f"Fix the name in dtypes=, or remove the entry"
        )
