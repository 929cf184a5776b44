"""Lance sink: attempts write uncommitted fragments; finalization commits them once.

Layout of a dataset written by refiner (``<output>`` is the Lance dataset URI)::

    <output>/data/*.lance, _versions/, _transactions/   Lance's own files
    <output>/<subdir>/<shard>__<attempt>/...            asset files or blocks (assets=...)
    <output>/_refiner/attempts/*.json                   attempt manifests (fragments in "extra")
    <output>/_refiner/lance/runs/<run>.json             the version each run read when it began
    <output>/_refiner/lance/journal/<attempt>.json      data files an attempt has written so far
    <output>/_refiner/lance/commits/<run>.json          what finalization committed (or why not)

Lance ignores the ``_refiner`` folder and the asset folder.
"""

from .sink import LanceCommitConflict, LanceSink
from .writer import LanceAttemptWriter

__all__ = ["LanceAttemptWriter", "LanceCommitConflict", "LanceSink"]
