"""The nested blocks of a component's ``defs.yaml``: templates rendered, then validated.

Dagster renders ``{{ env.NAME }}`` templates only in fields it resolves itself; a plain
pydantic block (``storage:``, ``fanout:`` ...) would keep the template text. A block
field annotated with :func:`block_resolver` renders every template inside the block,
then validates the result with the block's own class, so a mistake is reported by that
class (the unknown field with the name meant, the bad value with the fix) when the
component loads. The ``defs.yaml`` schema lists the block's fields without constraining
them, so ``dg check defs`` does not stop first at "is not valid under any of the given
schemas".

Example:
    >>> from typing import Annotated
    >>> import dagster as dg
    >>> class Limits(dg.Model):
    ...     max_rows: int = 10
    >>> class Reader(dg.Component, dg.Model, dg.Resolvable):
    ...     limits: Annotated[Limits, block_resolver(Limits)] = Limits()
    ...     def build_defs(self, context): return dg.Definitions()
    >>> Reader.resolve_from_yaml("limits: {max_rows: '{{ 5 * 2 }}'}").limits.max_rows
    10
"""

from typing import Any

import dagster as dg
from pydantic import BaseModel


def block_resolver(model: type[BaseModel], *, optional: bool = False) -> dg.Resolver:
    """The ``dg.Resolver`` of a block field holding a ``model`` (or ``None`` if optional)."""

    def resolve(context: dg.ResolutionContext, value: Any) -> Any:
        rendered = context.resolve_value(value)
        if rendered is None or isinstance(rendered, model):
            return rendered
        return model.model_validate(rendered)

    fields = {
        name: {"description": field.description} if field.description else {}
        for name, field in model.model_fields.items()
    }
    schema_type: Any = dict[str, Any] | None if optional else dict[str, Any]
    return dg.Resolver(
        resolve,
        model_field_type=schema_type,
        json_schema_extra={"properties": fields},
    )
