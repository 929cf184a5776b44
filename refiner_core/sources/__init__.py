"""Sources: each one module implementing ``Source``; register new ones here."""

from .base import MAX_SHARDS, Shard, Source
from .items import ItemsSource
from .jsonl import JsonlSource
from .lerobot import LeRobotSource
from .parquet import ParquetSource

__all__ = [
    "MAX_SHARDS",
    "ItemsSource",
    "JsonlSource",
    "LeRobotSource",
    "ParquetSource",
    "Shard",
    "Source",
]
