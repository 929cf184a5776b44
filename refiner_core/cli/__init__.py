"""The ``refiner`` command: look inside an output folder or dataset version, local or S3.

    refiner inspect OUT                     rows, shards, attempts, asset columns, blocks, counters
                                            (a LeRobot dataset: episodes, cameras, lengths)
    refiner verify OUT                      every reference resolves (exit 1 naming row and column);
                                            for a LeRobot dataset, its videos match its episodes
    refiner preview OUT --html report.html  a page with sampled images, block fill and counters
                                            (a LeRobot dataset: a frame per episode and camera)
    refiner history DATASET                 a dataset folder's versions: state, published at,
                                            run, parent, rows; * marks the published one
    refiner rollback DATASET [--to v-...]   point readers at an earlier version (default: the
                                            published one's parent); deletes nothing

``OUT`` is a folder a writer wrote to, a Dagster dataset's version folder
(``.../<asset>/v-<run>``), or the dataset's folder itself (its published version).
For S3, credentials come from the usual AWS variables; pass ``--endpoint-url`` for
MinIO/R2/moto and ``-o key=value`` for any other s3fs option.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> from click.testing import CliRunner
    >>> from refiner_core.cli import main
    >>> out = tempfile.mkdtemp()
    >>> _ = mdr.from_items([{"n": 1}]).write_parquet(out).launch_local()
    >>> CliRunner().invoke(main, ["verify", out]).exit_code
    0
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click
from rich.console import Console

from .console import output_console
from .storage import NotAnOutput, StoredOutput, open_output


def _storage_options(endpoint_url: str | None, options: tuple[str, ...]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="-o")
        try:
            parsed[key] = json.loads(value)
        except ValueError:
            parsed[key] = value
    if endpoint_url:
        parsed["endpoint_url"] = endpoint_url
    return parsed


def _open(out: str, endpoint_url: str | None, options: tuple[str, ...]) -> StoredOutput:
    try:
        return open_output(out, _storage_options(endpoint_url, options) or None)
    except NotAnOutput as exc:
        raise click.ClickException(str(exc)) from exc


def _lerobot(out: str, endpoint_url: str | None, options: tuple[str, ...]) -> Any:
    """The LeRobot dataset at ``out`` (or at the Dagster version ``out`` names), else ``None``."""
    from .lerobot import load_dataset
    from .verify import lerobot_version

    storage_options = _storage_options(endpoint_url, options) or None
    root = out
    if not lerobot_version(root, storage_options):
        try:
            stored = open_output(out, storage_options)
        except NotAnOutput:
            return None
        if stored.format != "lerobot":
            return None
        root = stored.url
    try:
        return load_dataset(root, storage_options)
    except ValueError as exc:  # meta/ that cannot be read: it names the file and the fix
        raise click.ClickException(str(exc)) from exc


def _location_options(command):
    command = click.option(
        "-o",
        "--storage-option",
        "options",
        multiple=True,
        metavar="KEY=VALUE",
        help="An fsspec/s3fs storage option (values are JSON when they parse), repeatable.",
    )(command)
    command = click.option(
        "--endpoint-url",
        envvar="REFINER_ENDPOINT_URL",
        help="S3 endpoint (MinIO, R2, moto); also REFINER_ENDPOINT_URL.",
    )(command)
    return click.argument("out")(command)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Look inside refiner output folders and dataset versions, local or on S3."""


@main.command()
@_location_options
@click.option("--all", "show_all", is_flag=True, help="List every block, not the first few.")
def inspect(out: str, endpoint_url: str | None, options: tuple[str, ...], show_all: bool) -> None:
    """Rows, shards, attempts, asset columns, blocks with size and fill, counters, files;
    for a LeRobot dataset, its episodes, cameras and lengths."""
    from .inspection import render_inspection

    dataset = _lerobot(out, endpoint_url, options)
    if dataset is not None:
        from .lerobot import render_lerobot

        render_lerobot(dataset, output_console(), show_all=show_all)
        return
    render_inspection(_open(out, endpoint_url, options), output_console(), show_all=show_all)


@main.command()
@_location_options
@click.option("--max-failures", default=20, show_default=True, help="Failures listed in full.")
@click.option(
    "--threads",
    default=16,
    show_default=True,
    type=click.IntRange(min=1),
    help="Table files read and files sized at once (1: one request at a time).",
)
def verify(
    out: str, endpoint_url: str | None, options: tuple[str, ...], max_failures: int, threads: int
) -> None:
    """Check that every blob reference and file path resolves within bounds (and
    checksums, when references carry them); for a LeRobot dataset, that every episode's
    video matches its table. Exit 1 on any failure."""
    from .verify import lerobot_version, print_video_audit, verify_output

    console = Console(highlight=False, soft_wrap=True)
    storage_options = _storage_options(endpoint_url, options) or None
    if lerobot_version(out, storage_options):
        from ..video import verify_video

        try:
            audit = verify_video(out, storage_options=storage_options)
        except ValueError as exc:  # meta/ that cannot be read: it names the file and the fix
            raise click.ClickException(str(exc)) from exc
        err = Console(stderr=True, highlight=False, soft_wrap=True)
        print_video_audit(audit, console, err, limit=max_failures)
        if not audit.ok:
            sys.exit(1)
        return
    report = verify_output(_open(out, endpoint_url, options), limit=max_failures, threads=threads)
    checked = (
        f"{report.rows:,} rows, {report.blobs:,} blob references, {report.paths:,} file paths, "
        f"{report.checksums:,} checksums"
    )
    if report.ok:
        console.print(f"[green]OK[/green]: {checked} checked in {out}")
        return
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    err.print(f"[red]FAILED[/red]: {report.failure_count:,} problem(s) in {out} ({checked})")
    for line in report.failures:
        err.print(f"  {line}", markup=False)
    if report.failure_count > len(report.failures):
        err.print(f"  ... {report.failure_count - len(report.failures):,} more")
    sys.exit(1)


@main.command()
@_location_options
@click.option(
    "--html",
    "html_path",
    required=True,
    type=click.Path(dir_okay=False, writable=True),
    help="Where to write the page (a local file).",
)
@click.option("--sample", default=24, show_default=True, help="Images on the contact sheet.")
def preview(
    out: str, endpoint_url: str | None, options: tuple[str, ...], html_path: str, sample: int
) -> None:
    """Write an HTML page: a contact sheet of sampled images, block fill, counters; for a
    LeRobot dataset, the first frame of each sampled episode and camera."""
    from .preview import build_preview

    dataset = _lerobot(out, endpoint_url, options)
    if dataset is not None:
        from .lerobot import build_lerobot_preview

        page = build_lerobot_preview(dataset, sample=sample)
    else:
        page = build_preview(_open(out, endpoint_url, options), sample=sample)
    temporary = f"{html_path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(page.html)
    os.replace(temporary, html_path)  # never a half-written page
    Console(highlight=False).print(f"wrote {html_path} ({page.images} images)")


def _dataset(out: str, endpoint_url: str | None, options: tuple[str, ...]) -> Any:
    from ..io import DataFolder
    from .history import dataset_folder

    folder = DataFolder(out, _storage_options(endpoint_url, options) or None)
    try:
        return dataset_folder(folder)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


@main.command()
@_location_options
def history(out: str, endpoint_url: str | None, options: tuple[str, ...]) -> None:
    """List a dataset folder's versions: name, state, published at, run, parent, rows;
    ``*`` marks the one readers see."""
    from .history import render_history

    render_history(_dataset(out, endpoint_url, options), output_console())


@main.command()
@_location_options
@click.option("--to", "to", metavar="v-...", help="The version to publish again (default: parent).")
@click.option("--reason", help="Why, recorded with the rollback.")
@click.option("--by", help="Who, recorded with the rollback (default: your user name).")
def rollback(
    out: str,
    endpoint_url: str | None,
    options: tuple[str, ...],
    to: str | None,
    reason: str | None,
    by: str | None,
) -> None:
    """Point the dataset's readers at an earlier published version (default: the
    published version's parent) in one atomic write; nothing is deleted."""
    import getpass

    from ..io.dataset_history import RollbackRefused
    from ..io.dataset_history import rollback as move_back

    folder = _dataset(out, endpoint_url, options)
    try:
        pointer = move_back(folder, to=to, reason=reason, by=by or getpass.getuser())
    except RollbackRefused as exc:
        raise click.ClickException(str(exc)) from exc
    moved = pointer["rolled_back"]
    Console(highlight=False, soft_wrap=True).print(
        f"rolled {out} back from {moved['from']} to {moved['to']}", markup=False
    )


__all__ = ["main"]
