"""Data file names: a template carrying the shard and attempt, checked to stay inside the output."""

from __future__ import annotations

import re
import string

from ..io.datafile import check_relative
from ..manifests._attempts import ATTEMPT_ID_PATTERN, SHARD_ID_PATTERN

_FIELDS = {"shard", "attempt"}


class FilenameTemplate:
    """``"{shard}__{attempt}.parquet"``-style names; both fields are required, written
    plainly (no format spec such as ``{shard:>12}``, no conversion such as ``{shard!r}``).

    Example:
        >>> FilenameTemplate("part-{shard}-{attempt}.parquet").format("00001", "0123456789ab")
        'part-00001-0123456789ab.parquet'
    """

    def __init__(self, template: str) -> None:
        if not isinstance(template, str) or not template:
            raise ValueError(f"filename_template must be a non-empty string, got {template!r}")
        try:
            parsed = [
                (literal, field, spec or "", conversion)
                for literal, field, spec, conversion in string.Formatter().parse(template)
                if field is not None
            ]
        except ValueError as exc:
            raise ValueError(
                f"filename_template {template!r} is not a valid format string: {exc}"
            ) from exc
        _refuse_formatting(template, parsed)
        names = {field for _, field, _, _ in parsed}
        unknown = names - _FIELDS
        if unknown:
            raise ValueError(
                f"filename_template {template!r} uses unknown fields {sorted(unknown)}; "
                "only {shard} and {attempt} are available"
            )
        if names != _FIELDS:
            raise ValueError(
                f"filename_template {template!r} must contain both {{shard}} and {{attempt}} so "
                "every attempt writes its own file and finalization can tell attempts apart"
            )
        self.template = template
        check_relative(self.format("00000", "0" * 12), what=f"filename_template {template!r}")
        pattern = ""
        for literal, field, _, _ in string.Formatter().parse(template):
            pattern += re.escape(literal)
            if field == "shard":
                pattern += f"(?P<shard>{SHARD_ID_PATTERN})"
            elif field == "attempt":
                pattern += f"(?P<attempt>{ATTEMPT_ID_PATTERN})"
        self._regex = re.compile(pattern + r"\Z")

    def check_readable(self, *, suffixes: tuple[str, ...], asset_subdir: str | None) -> None:
        """Refuse a template whose files a reader of the output folder would not see.

        Readers of a folder skip names starting with ``_`` or ``.`` (``_refiner/`` is
        the engine's own), skip the asset folder, and read only files ending in one
        of ``suffixes``; a data file named there would be lost, or would overwrite
        the engine's files.
        """
        sample = self.format("00000", "0" * 12)
        parts = sample.split("/")
        hidden = next((p for p in parts if p.startswith(("_", "."))), None)
        if hidden is not None:
            raise ValueError(
                f"filename_template {self.template!r} makes the path component {hidden!r}: names "
                "starting with '_' or '.' are reserved for refiner's own files (_refiner/) and "
                "skipped by readers, so the data would not read back. Start every folder and "
                "file name with another character"
            )
        if asset_subdir is not None and (
            sample == asset_subdir or sample.startswith(asset_subdir.rstrip("/") + "/")
        ):
            raise ValueError(
                f"filename_template {self.template!r} names files inside the asset folder "
                f"{asset_subdir!r}, which readers skip and finalization cleans; put the data "
                "files outside it"
            )
        if not parts[-1].endswith(suffixes):
            raise ValueError(
                f"filename_template {self.template!r} names files that do not end in "
                f"{' or '.join(suffixes)}, so readers of the folder would skip them; end the "
                f"template with {suffixes[0]}"
            )

    def format(self, shard_id: str, attempt_id: str) -> str:
        return self.template.format(shard=shard_id, attempt=attempt_id)

    def parse(self, relative: str) -> tuple[str, str] | None:
        """``(shard, attempt)`` of a file this template named, else ``None``."""
        match = self._regex.match(relative)
        return (match["shard"], match["attempt"]) if match else None


def _refuse_formatting(template: str, parsed: list[tuple[str, str, str, str | None]]) -> None:
    """Refuse format specs and conversions: they pad with spaces or add quotes, making
    names that are awkward to use and that finalization could not match to attempts."""
    for _, field, spec, conversion in parsed:
        if spec or conversion:
            shown = field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise ValueError(
                f"filename_template {template!r} writes {{{shown}}}: format specs (':...') and "
                "conversions ('!r', '!s', '!a') are not allowed, since they put spaces or "
                f"quotes into file names; write the field as {{{field}}}"
            )
