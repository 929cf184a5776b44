"""What a run dir was made for: a fingerprint of every stage's plan, steps and sink.

``launch_local(rundir=...)`` resumes a run by skipping the shards its run dir
records as done. That is only right for the pipeline that made the run dir, so the
first launch records a :class:`RunFingerprint` (``<rundir>/fingerprint.json``) and
every later launch compares its own: any difference is a :class:`RunDirMismatch`
naming the run dir and what differs, unless ``fresh=True`` asks for a new run.

A stage is described by its kind and name (a writer's name holds its output URL),
its steps (kind, settings, and each callback's module, name and code), its sink
(format, file names, asset settings) and, once planned, a digest of its shards
(ids and what each reads: files and row groups, byte ranges, items).

Example:
    >>> import refiner_core as mdr
    >>> a = describe_sequence(mdr.from_items([{"x": 1}]).map(lambda r: {"y": 1}).write_parquet("/o"))
    >>> b = describe_sequence(mdr.from_items([{"x": 1}]).write_parquet("/o"))
    >>> differences(a, b)
    ['stage 0 (write_parquet /o): steps: 1 step(s) recorded, 0 now']
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from typing import Any

from ..errors import RefinerError

FINGERPRINT_FILE = "fingerprint.json"


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable_repr(value: Any) -> str:
    """``repr`` without the memory addresses default reprs carry (they change per process)."""
    return _ADDRESS.sub("", repr(value))


class RunDirMismatch(RefinerError):
    """A run dir was made by another pipeline than the one launched on it."""


def _callable_id(fn: Any) -> str:
    """Module, name and a digest of the code of ``fn`` (or of its class)."""
    target = fn
    code = getattr(target, "__code__", None)
    if code is None and not isinstance(target, type):
        call = type(target).__dict__.get("__call__")
        code = getattr(call, "__code__", None)
        target = type(target) if call is not None else target
    name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__qualname__)}"
    if code is None:
        return name
    digest = hashlib.sha256(code.co_code + repr(_constants(code)).encode()).hexdigest()[:16]
    return f"{name}#{digest}"


def _constants(code: Any) -> tuple:
    """A code object's constants, nested code objects by their own bytecode."""
    return tuple(
        (c.co_name, c.co_code, _constants(c)) if hasattr(c, "co_code") else c
        for c in code.co_consts
    )


def _value(value: Any) -> Any:
    if callable(value) and not isinstance(value, type):
        return _callable_id(value)
    if isinstance(value, dict):
        return {str(k): _value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return _stable_repr(value)


def _step(step: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": step.kind}
    if dataclasses.is_dataclass(step):
        for f in dataclasses.fields(step):
            if f.name not in ("uid", "index"):
                out[f.name] = _value(getattr(step, f.name))
    return out


# Settings that say where or how to connect, not what is read (and may hold secrets).
_NOT_DESCRIBED = ("storage_options",)


def _source(source: Any) -> dict[str, Any]:
    """The source's settings: short values and paths as they are, anything else (items,
    dtypes) as a digest."""
    out: dict[str, Any] = {"name": source.name}
    for key, value in sorted(vars(source).items()):
        if key.startswith("_") or key in _NOT_DESCRIBED:
            continue
        described = _value(value)
        text = json.dumps(described, sort_keys=True, default=str)
        plain = not isinstance(described, dict | list) or all(isinstance(v, str) for v in described)
        if len(text) > 120 or not plain:  # rows of data are not copied into the run dir
            described = f"sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]}"
        out[key] = described
    return out


def _sink(sink: Any) -> dict[str, Any]:
    template = getattr(sink, "template", None)
    return {
        "url": sink.url,
        "format": getattr(sink, "format", None),
        "filename_template": getattr(template, "template", None),
        "assets": _stable_repr(getattr(sink, "assets", None)),
        "mode": getattr(sink, "mode", None),
        "compression": getattr(sink, "compression", None),
    }


def describe_stage(stage: Any) -> dict[str, Any]:
    """The parts of ``stage`` that decide what it writes (not yet its shards)."""
    out: dict[str, Any] = {"kind": stage.kind, "name": stage.name}
    pipeline = getattr(stage, "pipeline", None)
    if pipeline is not None:
        out["source"] = _source(pipeline.source)
        out["steps"] = [_step(s) for s in pipeline.steps]
    sink = getattr(stage, "sink", None)
    if sink is not None:
        out["sink"] = _sink(sink)
    return out


def describe_sequence(sequence: Any) -> list[dict[str, Any]]:
    return [describe_stage(stage) for stage in sequence.stages]


def shards_digest(shards: list[Any]) -> str:
    """A digest of the planned shards: their ids and what each one reads."""
    h = hashlib.sha256()
    for shard in shards:
        h.update(shard.id.encode())
        h.update(_stable_repr(shard.payload).encode())
    return f"{len(shards)} shards, sha256 {h.hexdigest()[:16]}"


def _stage_label(index: int, stage: dict[str, Any]) -> str:
    return f"stage {index} ({stage.get('name')})"


def _flat(stage: dict[str, Any]) -> dict[str, Any]:
    """``{"sink": {"format": ...}}`` as ``{"sink format": ...}`` (steps stay a list)."""
    out: dict[str, Any] = {}
    for key, value in stage.items():
        if isinstance(value, dict):
            out.update({f"{key} {k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def differences(recorded: list[dict[str, Any]], now: list[dict[str, Any]]) -> list[str]:
    """What differs between two stage descriptions, one line per difference."""
    if len(recorded) != len(now):
        return [f"{len(recorded)} stage(s) recorded, {len(now)} now"]
    lines = []
    for index, (old_stage, new_stage) in enumerate(zip(recorded, now, strict=True)):
        old, new = _flat(old_stage), _flat(new_stage)
        for key in sorted(set(old) | set(new)):
            if old.get(key) == new.get(key) or key == "name":
                continue  # the name repeats what the sink's own fields say
            if key == "steps" and len(old.get(key) or []) != len(new.get(key) or []):
                detail = (
                    f"{len(old.get(key) or [])} step(s) recorded, {len(new.get(key) or [])} now"
                )
            elif key == "steps":
                changed = [
                    f"step {i} ({n.get('kind')})"
                    for i, (o, n) in enumerate(zip(old[key], new[key], strict=True))
                    if o != n
                ]
                detail = ", ".join(changed) + " changed"
            else:
                detail = f"recorded {_short(old.get(key))}, now {_short(new.get(key))}"
            lines.append(f"{_stage_label(index, new_stage)}: {key}: {detail}")
        if not lines and old.get("name") != new.get("name"):
            lines.append(f"{_stage_label(index, new_stage)}: recorded {_short(old.get('name'))}")
    return lines


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


class RunFingerprint:
    """The fingerprint file of one run dir: compared on every launch, extended as
    stages are planned (their shard digests)."""

    def __init__(self, rundir: str) -> None:
        self.rundir = rundir
        self.path = os.path.join(rundir, FINGERPRINT_FILE)
        self.data: dict[str, Any] | None = None
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.data = json.load(f)

    def _refuse(self, lines: list[str]) -> RunDirMismatch:
        listed = "; ".join(lines[:5]) + (f"; and {len(lines) - 5} more" if len(lines) > 5 else "")
        return RunDirMismatch(
            f"run dir {self.rundir} was made for a different pipeline ({listed}). Its completed "
            "shards belong to that pipeline and would be skipped. Use another rundir, or pass "
            "fresh=True to launch_local to discard this run dir's progress and start a new run"
        )

    def check_stages(self, stages: list[dict[str, Any]]) -> None:
        """Refuse another pipeline; record these stages on a run dir's first launch."""
        if self.data is None:
            self.data = {"stages": stages, "shards": {}}
            self._save()
            return
        lines = differences(self.data["stages"], stages)
        if lines:
            raise self._refuse(lines)

    def check_shards(self, index: int, stage: dict[str, Any], shards: list[Any]) -> None:
        """Refuse a stage whose shards differ from the ones recorded for it."""
        assert self.data is not None
        digest = shards_digest(shards)
        recorded = self.data["shards"].get(str(index))
        if recorded is None:
            self.data["shards"][str(index)] = digest
            self._save()
        elif recorded != digest:
            raise self._refuse(
                [f"{_stage_label(index, stage)}: shards: recorded {recorded}, planned {digest}"]
            )

    def _save(self) -> None:
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)
