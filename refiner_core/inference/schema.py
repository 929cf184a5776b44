"""Structured output: turn a pydantic model into the JSON schema providers accept, and
validate the model's answer against it."""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from typing import Any

import pydantic

from .errors import StructuredOutputError, trim


@dataclass(frozen=True)
class StructuredOutput:
    """A pydantic model prepared for a provider's structured-output option.

    ``json_schema`` is pydantic's schema; ``strict_schema`` is the variant OpenAI's
    strict mode requires (every object closed with ``additionalProperties: false``,
    every property listed as required, no ``default`` keywords, ``$ref`` siblings
    inlined).
    """

    model: type[pydantic.BaseModel]
    name: str
    json_schema: dict[str, Any]
    strict_schema: dict[str, Any]

    def validate(self, text: str) -> pydantic.BaseModel:
        """Parse the model's JSON ``text`` into an instance, or raise
        :class:`StructuredOutputError` carrying the text and pydantic's errors."""
        try:
            return self.model.model_validate_json(text)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            details = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
                for err in errors[:5]
            )
            raise StructuredOutputError(
                f"the model's answer does not match schema {self.name}: {details}. "
                f"Answer was: {trim(text)!r}. Make the prompt ask for exactly these "
                "fields, or relax the schema (optional fields, wider types).",
                text=text,
                schema=self.name,
                errors=errors,
            ) from None


def structured_output(schema: Any) -> StructuredOutput:
    """Build (and cache) the :class:`StructuredOutput` for a pydantic model class."""
    if not (isinstance(schema, type) and issubclass(schema, pydantic.BaseModel)):
        raise TypeError(
            f"schema= must be a pydantic model class (a subclass of pydantic.BaseModel), "
            f"got {schema!r}; wrap other types in a model, e.g. "
            "class Answer(BaseModel): items: list[str]"
        )
    return _build(schema)


@functools.lru_cache(maxsize=256)
def _build(model: type[pydantic.BaseModel]) -> StructuredOutput:
    json_schema = model.model_json_schema()
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", model.__name__)[:64] or "output"
    return StructuredOutput(model, name, json_schema, _strict(json_schema))


_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    return _close(copy.deepcopy(schema), schema.get("$defs", {}), depth=0)


def _close(node: Any, defs: dict[str, Any], depth: int) -> Any:
    if isinstance(node, list):
        return [_close(item, defs, depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1 and depth < 32:
        # OpenAI rejects keywords next to $ref: inline the definition instead.
        target = defs.get(ref.rsplit("/", 1)[-1], {})
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _close(merged, defs, depth + 1)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        rest = {k: v for k, v in node.items() if k != "allOf"}
        return _close({**all_of[0], **rest}, defs, depth + 1)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "default":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            # Maps of name -> schema: close each schema, keep every name.
            out[key] = {name: _close(sub, defs, depth) for name, sub in value.items()}
        else:
            out[key] = _close(value, defs, depth)
    if out.get("type") == "object" or "properties" in out:
        out["additionalProperties"] = False
        out["required"] = list(out.get("properties", {}))
    return out
