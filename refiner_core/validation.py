"""Argument checks shared by the public API."""

from __future__ import annotations

from typing import Any


def check_positive(name: str, value: Any) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is an integer above zero.

    >>> check_positive("num_workers", 0)
    Traceback (most recent call last):
    ...
    ValueError: num_workers must be a positive integer, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
