"""Planted keys never land anywhere a run writes: a byte-level scan of everything it left.

A process is started with fake ``OPENAI_API_KEY``, ``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY`` in its environment and runs the leak attempts of
:mod:`tests.reliability.leak_attempts` (rows pointing at ``/proc/self/environ``
directly, through URL chains and through a symlink to a copy on ``/dev/shm``, blob
reads of it directly and through URL chains, a model server echoing the key JSON-escaped, S3 writes with
botocore at DEBUG, Dagster materializations through the blob IO manager). Every byte
of its outputs, manifests, summaries, run dirs, logs, standard output and error,
error texts, S3 objects and Dagster instance (event logs included) is then searched
for the keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.reliability.leak_attempts import CHAINS, UNEXPECTED_SUCCESS, escaped
from tests.s3_fixtures import *  # noqa: F403

OPENAI_KEY = "sk-planted-SCAN-4f1c0a9e7b2d4c6f8a1e3b5d7f9a0c2e"
AWS_KEY_ID = "AKIAPLANTEDSCAN00042"
AWS_SECRET = "planted/SCAN+secret0123456789abcdefghijKLMN"
PLANTED = (OPENAI_KEY, AWS_KEY_ID, AWS_SECRET)
REPO = Path(__file__).resolve().parents[2]


def forms(secret: str) -> list[bytes]:
    """The ways a leaked key could be spelled in a file: raw, JSON-escaped, JSON-quoted."""
    return [secret.encode(), escaped(secret).encode(), json.dumps(secret).encode()[1:-1]]


def all_bytes(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def test_planted_keys_land_nowhere(tmp_path, s3_server, s3_bucket):
    workdir = tmp_path / "work"
    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "OPENAI_API_KEY": OPENAI_KEY,
        "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(REPO),
    }
    env.pop("AWS_SESSION_TOKEN", None)
    env.pop("AWS_SECURITY_TOKEN", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.reliability.leak_attempts", str(workdir)]
        + [s3_server.endpoint_url, s3_bucket],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    client = s3_server.client()
    stored = {
        f"s3://{s3_bucket}/{k}": client.get_object(Bucket=s3_bucket, Key=k)["Body"].read()
        for k in s3_server.keys(s3_bucket)
    }
    assert any(k.endswith("/clean/_refiner/summary.json") for k in stored)
    texts = {
        "stdout": done.stdout,
        "stderr": done.stderr,
        **stored,
        **all_bytes(workdir),
        **all_bytes(home),
    }
    leaks = [
        (where, secret)
        for where, data in texts.items()
        for secret in PLANTED
        if any(form in data for form in forms(secret))
    ]
    assert leaks == []

    errors = json.loads((workdir / "errors.json").read_text())
    event_logs = json.loads((workdir / "event_logs.json").read_text())
    debug_log = (workdir / "logs" / "debug.log").read_text()
    # The attempts really happened and were refused for the right reason.
    wrapped = int((workdir / "wrapped_attempts.txt").read_text())
    assert errors.count(UNEXPECTED_SUCCESS) == 0
    sources = len(CHAINS) + os.path.ismount("/dev/shm")
    assert wrapped == sources + len(CHAINS) + 2
    assert sum("pseudo-filesystem" in e for e in errors) == 4 + wrapped
    assert all(sum(repr(chain) in e for e in errors) >= 2 for chain in CHAINS)
    assert sum("blob reads refuse it" in e for e in errors) == 2 + len(CHAINS)
    assert any("bad request for key ***" in e for e in errors)
    assert any("pseudo-filesystem" in e for e in event_logs)
    assert any(CHAINS[0] in e and "pseudo-filesystem" in e for e in event_logs)
    if os.path.ismount("/dev/shm"):
        assert any("shared-dagster.png" in e and "pseudo-filesystem" in e for e in event_logs)
    assert "botocore.endpoint" in debug_log and "Credential=***/" in debug_log


def test_the_scrubber_masks_keys_echoed_json_escaped():
    from refiner_core.inference.errors import scrub

    key = "sk-live/AbC123"
    echoes = [
        json.dumps({"key": key}).replace("s", "\\u0073", 1),  # one character escaped
        "".join(f"\\u{ord(c):04X}" for c in key),  # every character, upper-case hex
        json.dumps(key).replace("/", "\\/"),  # the solidus escaped
    ]
    for echo in echoes:
        decoded = echo.replace("\\/", "/").encode().decode("unicode_escape")
        assert key in decoded  # the echo does carry the key
        scrubbed = scrub(echo, [key])
        assert key not in scrubbed.replace("\\/", "/").encode().decode("unicode_escape")
        assert "***" in scrubbed, echo
    assert scrub("sk-live/AbC12 is not the key", [key]) == "sk-live/AbC12 is not the key"


def test_botocore_request_logs_mask_the_access_key_id_and_session_token(caplog):
    import logging

    from refiner_core.io.log_redaction import install_log_redaction

    install_log_redaction()
    request = (
        "<AWSPreparedRequest headers={'Authorization': b'AWS4-HMAC-SHA256 "
        f"Credential={AWS_KEY_ID}/20260101/us-east-1/s3/aws4_request, Signature=abc', "
        "'X-Amz-Security-Token': b'FwoGZXIvYXdzEPLANTEDTOKEN'}>"
    )
    with caplog.at_level(logging.DEBUG, logger="botocore"):
        logging.getLogger("botocore.endpoint").debug("Sending http request: %s", request)
        logging.getLogger("botocore.auth").debug("CanonicalRequest:\nx-amz-security-token:TOK3N")
        body = f"<Error><AWSAccessKeyId>{AWS_KEY_ID}</AWSAccessKeyId></Error>".encode()
        logging.getLogger("botocore.parsers").debug("Response body:\n%r", body)
    assert AWS_KEY_ID not in caplog.text and "PLANTEDTOKEN" not in caplog.text
    assert "TOK3N" not in caplog.text
    assert "Credential=***/20260101" in caplog.text
