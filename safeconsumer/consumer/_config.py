"""Config values that are secrets never leave the process through logs, reprs or telemetry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REDACTED = "[redacted]"

#: Keys holding key material or credentials whose names do not say "password" or "secret".
_SECRET_KEYS = frozenset({"ssl.key.pem", "ssl_key", "sasl.oauthbearer.config", "ssl.keystore.pem"})


def is_secret(key: str) -> bool:
    """Whether the config key ``key`` holds a secret (``*password*``, ``*secret*``, private keys)."""
    k = key.lower()
    return "password" in k or "secret" in k or "private.key" in k or k in _SECRET_KEYS


def redact_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``conf`` with every secret value replaced by ``"[redacted]"``, safe to log."""
    return {k: (REDACTED if is_secret(str(k)) else v) for k, v in conf.items()}
