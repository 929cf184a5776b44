"""Run a command that sees a test's own folders at fixed absolute paths.

Code samples that must run as written may name machine paths (``/data/videos.parquet``,
``/tmp/out``). Instead of writing there, and making every test session on the machine
queue for those paths, the command runs in a private mount namespace (``unshare
--mount``) where each path is a bind mount of a folder of the test. The machine's own
paths are never written; sessions run side by side.

As root, ``unshare --mount`` is enough; otherwise ``unshare --user --map-root-user``
needs unprivileged user namespaces. A missing mount point is created as an empty folder
(mount points cannot be made inside the namespace only) and left in place, since another
session may be mounting on it at the same time.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MOUNT_FAILED = 97
MOUNT_ERROR_PREFIX = "private mounts:"
HOW_TO_ENABLE = (
    "run the tests as root, or allow unprivileged user namespaces "
    "(sysctl kernel.unprivileged_userns_clone=1, or kernel.apparmor_restrict_unprivileged_userns=0 "
    "on Ubuntu); in a container, start it with --privileged or --cap-add SYS_ADMIN"
)


class PrivateMountsUnavailable(RuntimeError):
    """This machine cannot give a command a private mount namespace with bind mounts."""


@dataclass(frozen=True)
class Bind:
    """``source`` (a folder of the test) is seen at ``target`` inside the namespace."""

    source: Path
    target: Path
    read_only: bool = False


def unshare_command(search_path: str | None = None) -> list[str]:
    """The ``unshare`` invocation that gives its command a private mount namespace."""
    unshare = shutil.which("unshare", path=search_path)
    mount = shutil.which("mount", path=search_path)
    if unshare is None or mount is None:
        missing = " and ".join(n for n, p in (("unshare", unshare), ("mount", mount)) if not p)
        raise PrivateMountsUnavailable(
            f"{missing} not found on PATH: tests that run code at fixed paths (the seed "
            "samples) use a private mount namespace, which needs util-linux "
            "(apt-get install util-linux mount)"
        )
    if os.geteuid() == 0:
        return [unshare, "--mount", "--propagation", "private"]
    return [unshare, "--user", "--map-root-user", "--mount", "--propagation", "private"]


@functools.cache
def check_available(prefix: tuple[str, ...]) -> None:
    """Fails with what to change when ``prefix`` cannot start a command (checked once)."""
    try:
        done = subprocess.run(
            [*prefix, "true"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as exc:
        raise PrivateMountsUnavailable(f"{shlex.join(prefix)} cannot run: {exc}") from exc
    if done.returncode != 0:
        raise PrivateMountsUnavailable(
            f"{shlex.join(prefix)} failed ({done.stderr.strip() or done.returncode}): "
            f"no private mount namespace for tests that run code at fixed paths; {HOW_TO_ENABLE}"
        )


def _mount_script(binds: Sequence[Bind]) -> str:
    """Shell that makes the bind mounts, then replaces itself with the command ("$@")."""
    lines = [f'fail() {{ echo "{MOUNT_ERROR_PREFIX} $1" >&2; exit {MOUNT_FAILED}; }}']
    for bind in binds:
        source, target = shlex.quote(str(bind.source)), shlex.quote(str(bind.target))
        lines += [
            f"[ -d {target} ] || [ ! -e {target} ] || fail "
            f"{shlex.quote(f'{bind.target} exists and is not a folder: nothing can be mounted on it')}",
            f"[ -d {target} ] || mkdir -p {target} 2>/dev/null || fail "
            f"{shlex.quote(f'cannot create the mount point {bind.target}: create it once as an empty folder (sudo mkdir -p {bind.target}) or run as root')}",
            f"mount --bind {source} {target} || fail "
            f"{shlex.quote(f'cannot bind {bind.source} onto {bind.target}')}",
        ]
        if bind.read_only:
            lines.append(
                f"mount -o remount,bind,ro {target} || fail "
                f"{shlex.quote(f'cannot make {bind.target} read-only')}"
            )
    lines.append('exec "$@"')
    return "\n".join(lines)


def command_with_binds(argv: Sequence[str], binds: Sequence[Bind]) -> list[str]:
    """``argv`` wrapped so that it runs with ``binds`` in a private mount namespace."""
    prefix = unshare_command()
    check_available(tuple(prefix))
    for bind in binds:
        if not bind.target.is_absolute():
            raise ValueError(f"bind target {bind.target} is not an absolute path")
        if not bind.source.is_dir():
            raise ValueError(f"bind source {bind.source} is not a folder")
    return [*prefix, "sh", "-c", _mount_script(binds), "private-mounts", *argv]


def run_with_binds(
    argv: Sequence[str],
    binds: Sequence[Bind],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Runs ``argv`` with ``binds``; raises :class:`PrivateMountsUnavailable` when a mount fails."""
    done = subprocess.run(
        command_with_binds(argv, binds),
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    raise_if_mounts_failed(done.returncode, done.stderr)
    return done


def raise_if_mounts_failed(returncode: int, stderr: str) -> None:
    """Raises with the mount step's message when that step, not the command, failed."""
    if returncode == MOUNT_FAILED:
        for line in stderr.splitlines():
            if line.startswith(MOUNT_ERROR_PREFIX):
                raise PrivateMountsUnavailable(line.removeprefix(MOUNT_ERROR_PREFIX).strip())
