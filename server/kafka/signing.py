"""Signed requests: an HMAC-SHA256 of the record value, in a header, checked by the consumer.

The producer of a request computes ``HMAC-SHA256(key, value)`` over the exact bytes of the
record value and sends it as the header ``unlearnsim-signature: hmac-sha256=<hex>``. With a key
configured, the consumer answers a request without a valid signature ``rejected`` with the
reason ``bad_signature: ...`` (and nothing changes). The key is a shared secret of the
producers allowed to ask for deletions and the consumer: it comes from an environment variable
(default ``UNLEARNSIM_SIGNING_KEY``) or a file (``--signing-key-file``, or the path in
``UNLEARNSIM_SIGNING_KEY_FILE``: a Docker secret), never from the repository or the command
line (which other users can read in the process list).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from simulator.errors import ConfigError

HEADER = "unlearnsim-signature"
SCHEME = b"hmac-sha256="
#: Prefix of every signature refusal (receipts say ``bad_signature: ...``).
BAD_SIGNATURE = "bad_signature"
#: Environment variable read for the key when no other source is named.
DEFAULT_ENV = "UNLEARNSIM_SIGNING_KEY"
#: Shortest key accepted, in bytes.
MIN_KEY_BYTES = 16


def sign(value: bytes, key: bytes) -> bytes:
    """The header value that signs ``value``."""
    return SCHEME + hmac.new(key, value, hashlib.sha256).hexdigest().encode()


def verify(value: bytes, headers: Sequence[tuple[str, bytes]], key: bytes) -> str | None:
    """Why ``value`` is not signed with ``key`` (``bad_signature: ...``), or None when it is."""
    given = [v for k, v in headers if k == HEADER]
    if not given:
        return f"{BAD_SIGNATURE}: no {HEADER} header"
    if len(given) > 1:
        return f"{BAD_SIGNATURE}: {len(given)} {HEADER} headers"
    if not hmac.compare_digest(given[0], sign(value, key)):
        return f"{BAD_SIGNATURE}: the signature does not match the record"
    return None


def load_key(
    *,
    env_var: str | None = None,
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> bytes | None:
    """Load the signing key.

    The signing key from ``path``, else ``env_var``, else the file named by
    ``$UNLEARNSIM_SIGNING_KEY_FILE``, else ``$UNLEARNSIM_SIGNING_KEY``.

    Returns None when no source is configured (requests are not signed). A file's trailing
    newline is not part of the key.

    Raises
    ------
    ConfigError
        A named source is missing or empty, or the key is shorter than ``MIN_KEY_BYTES``.
    """
    env = os.environ if environ is None else environ
    if path is None and env_var is None and env.get(DEFAULT_ENV + "_FILE"):
        path = Path(env[DEFAULT_ENV + "_FILE"])
    if path is not None:
        try:
            key = path.read_bytes().rstrip(b"\r\n")
        except OSError as exc:
            raise ConfigError(f"cannot read the signing key: {exc}", "--signing-key-file") from exc
        where = "--signing-key-file"
    elif env_var is not None:
        if env_var not in env:
            raise ConfigError(f"${env_var} is not set", "--signing-key-env")
        key, where = env[env_var].encode(), "--signing-key-env"
    elif env.get(DEFAULT_ENV):
        key, where = env[DEFAULT_ENV].encode(), DEFAULT_ENV
    else:
        return None
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"the signing key should be at least {MIN_KEY_BYTES} bytes", where)
    return key
