"""Config classes that refuse unknown fields, suggesting the name that was meant.

Pydantic and Dagster's config classes ignore keyword arguments they do not know, so
``RefinerBlobIOManager(base_ulr="s3://bucket/data")`` would construct and write to the
default location. Every refiner_dagster config class mixes in :class:`StrictFields`:
an unknown field is refused when the object is built, naming the field and the
nearest valid one.

Example:
    >>> import dagster as dg
    >>> class Settings(StrictFields, dg.Config):
    ...     base_url: str | None = None
    >>> try:
    ...     Settings(base_ulr="s3://bucket/data")
    ... except ValueError as error:
    ...     print(str(error).splitlines()[1].strip())
    Value error, Settings got an unknown field 'base_ulr' (did you mean 'base_url'?); valid fields: base_url [type=value_error]
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


def unknown_fields_message(owner: str, given: Iterable[str], known: Iterable[str]) -> str | None:
    """The error for the names in ``given`` that are not in ``known``, or ``None``.

    >>> unknown_fields_message("IO manager", ["base_ulr", "format"], ["base_url", "format"])
    "IO manager got an unknown field 'base_ulr' (did you mean 'base_url'?); valid fields: base_url, format"
    """
    valid = sorted(set(known))
    unknown = [name for name in given if name not in valid]
    if not unknown:
        return None
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
        named.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    noun = "an unknown field" if len(unknown) == 1 else "unknown fields"
    return f"{owner} got {noun} {', '.join(named)}; valid fields: {', '.join(valid)}"


class StrictFields(BaseModel):
    """Mixin refusing fields the class does not declare (before any other validation).

    Input values stay out of the error text: config may carry credentials.
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = set(cls.model_fields)
            known.update(f.alias for f in cls.model_fields.values() if f.alias)
            message = unknown_fields_message(cls.__name__, data, known)
            if message is not None:
                raise ValueError(message)
        return data
