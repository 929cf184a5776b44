"""Keeping S3 credentials out of botocore's DEBUG logs.

With DEBUG logging, botocore's ``botocore.endpoint`` logger prints every prepared
request, headers included: the ``Authorization`` header names the access key id
(``Credential=AKIA.../...``) and a session token travels in ``X-Amz-Security-Token``;
``botocore.auth`` prints the canonical request, token included; ``botocore.parsers``
prints response bodies, and S3's signature errors echo ``<AWSAccessKeyId>``. The secret key itself
is never logged. :func:`install_log_redaction` adds a :class:`logging.Filter` to
those loggers (public ``logging`` API, nothing of botocore patched) that rewrites
such records with the values masked, before any handler sees them. Other botocore
loggers print no credentials (event hooks, retry decisions, credential sources by name).

Example:
    >>> import logging
    >>> install_log_redaction()
    >>> record = logging.LogRecord("botocore.endpoint", logging.DEBUG, "", 0,
    ...     "Sending http request: %s", ("Credential=AKIAEXAMPLE/20260101/us-east-1",), None)
    >>> CredentialFilter().filter(record), record.getMessage()
    (True, 'Sending http request: Credential=***/20260101/us-east-1')
"""

from __future__ import annotations

import logging
import re

REDACTED_LOGGERS = ("botocore.endpoint", "botocore.auth", "botocore.parsers")
_MASK = "***"
_PATTERNS = (
    re.compile(r"((?:X-Amz-)?Credential=)[^/\s'\"&,]+", re.IGNORECASE),
    re.compile(r"(<AWSAccessKeyId>)[^<]+", re.IGNORECASE),
    re.compile(
        r"(x-amz-security-token(?:['\"])?\s*[:=]\s*(?:b?['\"])?)[^'\"\s,&}]+", re.IGNORECASE
    ),
)


def redact(text: str) -> str:
    """``text`` with access key ids and session tokens masked."""
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + _MASK, text)
    return text


class CredentialFilter(logging.Filter):
    """Rewrites a record's message with credentials masked; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted is left to logging's own error
            return True
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


_FILTER = CredentialFilter()


def install_log_redaction() -> None:
    """Add the credential filter to botocore's request loggers; idempotent."""
    for name in REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
