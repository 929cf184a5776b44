"""Refiner-side helper that runs one peer workload (``bench/peer/workloads.py``).

The bench scripts call :func:`run_peer` once per repeat, between their own runs, so
the peer sees the same data and the same machine load::

    from bench.peer.runner import Peer

    peer = Peer.find()            # None when bench/peer/.venv is missing
    seconds = peer.run("pack", "--index", index, "--out", out, "--workers", "2", "--rows", "16000")

The peer's environment has ``MACRODATA_API_KEY`` removed, an empty
``XDG_CONFIG_HOME`` (no stored key) and ``MACRODATA_BASE_URL`` pointing at a loopback
port this process holds bound but not listening, so the library's one call home per
``launch_local`` is refused on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEER_PYTHON = HERE / ".venv" / "bin" / "python"
WORKLOADS = HERE / "workloads.py"


def closed_port() -> socket.socket:
    """A loopback TCP port bound but never listened on: connecting is refused at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@dataclass
class Peer:
    python: Path
    version: str = ""
    _sock: socket.socket | None = field(default=None, repr=False)
    _config: str = field(default="", repr=False)

    @classmethod
    def find(cls, python: Path | None = None) -> Peer | None:
        python = python or PEER_PYTHON
        if not Path(python).exists():
            return None
        peer = cls(Path(python))
        peer._sock = closed_port()
        peer._config = tempfile.mkdtemp(prefix="peer-config-")
        done = subprocess.run(
            [
                str(python),
                "-c",
                "import importlib.metadata as m; print(m.version('macrodata-refiner'))",
            ],
            capture_output=True,
            text=True,
            check=True,
            env=peer.env(),
        )
        peer.version = done.stdout.strip()
        return peer

    @property
    def label(self) -> str:
        return f"macrodata-refiner {self.version}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "MACRODATA_API_KEY"}
        assert self._sock is not None
        env["MACRODATA_BASE_URL"] = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        env["XDG_CONFIG_HOME"] = self._config
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        return env

    def run(self, workload: str, *args: str, timeout: float = 1800) -> float:
        """Seconds of one timed peer run (the library call only)."""
        done = subprocess.run(
            [str(self.python), str(WORKLOADS), workload, *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            cwd=HERE,
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise RuntimeError(f"peer {workload} failed: " + " | ".join(tail))
        return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        shutil.rmtree(self._config, ignore_errors=True)


def add_peer_option(parser: argparse.ArgumentParser) -> None:
    """``--peer`` / ``--no-peer``: run macrodata-refiner too (default: when its venv exists)."""
    parser.add_argument(
        "--peer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run macrodata-refiner from bench/peer/.venv (default: when it exists)",
    )


def peer_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Peer | None:
    """The peer ``--peer`` asks for; a usage error when it was asked for and is missing."""
    peer = Peer.find() if args.peer is not False else None
    if args.peer and peer is None:
        parser.error("--peer: bench/peer/.venv is missing; run bash bench/peer/setup.sh")
    return peer
