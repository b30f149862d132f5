"""Kafka over TLS and SASL: kafka-python's security options from ``UNLEARNSIM_KAFKA_*`` variables.

Every Kafka client of unlearnsim (consumer, publisher, topic admin, producer, offset probe) is
built with :func:`client_options`, which maps these environment variables to kafka-python's
options (unset: plaintext, kafka-python's defaults):

=====================================  ===========================  ===========================
variable                               kafka-python option          value
=====================================  ===========================  ===========================
``UNLEARNSIM_KAFKA_SECURITY_PROTOCOL`` ``security_protocol``        PLAINTEXT, SSL,
                                                                    SASL_PLAINTEXT, SASL_SSL
``UNLEARNSIM_KAFKA_SSL_CAFILE``        ``ssl_cafile``               CA bundle (PEM) to trust
``UNLEARNSIM_KAFKA_SSL_CERTFILE``      ``ssl_certfile``             client certificate (mTLS)
``UNLEARNSIM_KAFKA_SSL_KEYFILE``       ``ssl_keyfile``              its private key
``UNLEARNSIM_KAFKA_SSL_CHECK_HOSTNAME`` ``ssl_check_hostname``      true (default) / false
``UNLEARNSIM_KAFKA_SASL_MECHANISM``    ``sasl_mechanism``           PLAIN, SCRAM-SHA-256,
                                                                    SCRAM-SHA-512
``UNLEARNSIM_KAFKA_SASL_USERNAME``     ``sasl_plain_username``      user
``UNLEARNSIM_KAFKA_SASL_PASSWORD_FILE`` ``sasl_plain_password``     file holding the password
``UNLEARNSIM_KAFKA_SASL_PASSWORD``     ``sasl_plain_password``      the password (prefer a file)
=====================================  ===========================  ===========================

Secrets stay out of the repository and of command lines: a password comes from a file (a
Docker secret under ``/run/secrets``) or the environment. docs/security.md shows the compose
settings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError

PREFIX = "UNLEARNSIM_KAFKA_"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_FILES = {"SSL_CAFILE": "ssl_cafile", "SSL_CERTFILE": "ssl_certfile", "SSL_KEYFILE": "ssl_keyfile"}


def client_options(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """kafka-python keyword options for TLS/SASL from ``environ`` (default ``os.environ``).

    Raises
    ------
    ConfigError
        An unknown protocol or mechanism, a file that does not exist, SASL without a user or
        password, or a SASL mechanism with a protocol that is not SASL_*.
    """
    env = os.environ if environ is None else environ

    def get(name: str) -> str | None:
        value = env.get(PREFIX + name)
        return value if value else None

    protocol = _protocol(get)
    out: dict[str, Any] = {}
    if protocol != "PLAINTEXT":
        out["security_protocol"] = protocol
    for name, option in _FILES.items():
        path = get(name)
        if path is not None:
            if not Path(path).is_file():
                raise ConfigError(f"no such file: {path}", PREFIX + name)
            out[option] = path
    check = get("SSL_CHECK_HOSTNAME")
    if check is not None:
        out["ssl_check_hostname"] = check.lower() not in ("0", "false", "no")
    out.update(_sasl(get, protocol))
    return out


def _protocol(get: Callable[[str], str | None]) -> str:
    """The security protocol (upper case; default PLAINTEXT), checked."""
    protocol = (get("SECURITY_PROTOCOL") or "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"should be one of {', '.join(PROTOCOLS)}, got {protocol}", PREFIX + "SECURITY_PROTOCOL"
        )
    return protocol


def _sasl(get: Callable[[str], str | None], protocol: str) -> dict[str, Any]:
    """The SASL options (none without a mechanism), checked against ``protocol``."""
    mechanism = get("SASL_MECHANISM")
    if mechanism is None:
        if protocol.startswith("SASL_"):
            raise ConfigError(f"{protocol} needs a SASL mechanism", PREFIX + "SASL_MECHANISM")
        return {}
    mechanism = mechanism.upper()
    if mechanism not in MECHANISMS:
        raise ConfigError(
            f"should be one of {', '.join(MECHANISMS)}, got {mechanism}",
            PREFIX + "SASL_MECHANISM",
        )
    if not protocol.startswith("SASL_"):
        raise ConfigError(
            f"SASL needs SECURITY_PROTOCOL SASL_SSL or SASL_PLAINTEXT, got {protocol}",
            PREFIX + "SASL_MECHANISM",
        )
    user = get("SASL_USERNAME")
    password = _password(get("SASL_PASSWORD_FILE"), get("SASL_PASSWORD"))
    if user is None or password is None:
        raise ConfigError("SASL needs a user name and a password", PREFIX + "SASL_USERNAME")
    return {
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


def _password(path: str | None, value: str | None) -> str | None:
    if path is not None:
        try:
            return Path(path).read_text().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(
                f"cannot read the password: {exc}", PREFIX + "SASL_PASSWORD_FILE"
            ) from exc
    return value


def describe(options: Mapping[str, Any]) -> str:
    """The options without secrets (for logs)."""
    shown = {k: ("***" if "password" in k else v) for k, v in options.items()}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "plaintext"
