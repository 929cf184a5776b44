"""What ``await generate(...)`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TokenUsage:
    """Tokens the provider reported for one request.

    ``input_tokens`` includes cached prompt tokens where the provider reports them
    separately (Anthropic's cache reads and writes).

    >>> TokenUsage(input_tokens=10, output_tokens=4).total_tokens
    14
    """

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class GenerationResponse:
    """One model answer.

    - ``text``: the model's text (with a ``schema``: the JSON text it produced).
    - ``usage``: :class:`TokenUsage` for this request.
    - ``raw``: the provider's decoded JSON response, unmodified.
    - ``object``: with ``schema=``, the validated pydantic instance; otherwise ``None``.

    >>> response = GenerationResponse(text="hi", usage=TokenUsage(3, 1), raw={})
    >>> response.text, response.usage.output_tokens, response.object
    ('hi', 1, None)
    """

    text: str
    usage: TokenUsage
    raw: dict[str, Any] = field(repr=False)
    object: Any = None
