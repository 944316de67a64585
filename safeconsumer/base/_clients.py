"""The clients safeconsumer creates for itself (admin clients, dead-letter producers, the describe
process): the part of the application's config they take, and where their librdkafka log lines go;
and config values that are secrets, which never leave the process through logs, reprs or telemetry."""

from __future__ import annotations

import logging
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


#: Consumer settings an admin client of the same cluster needs (connection and security).
_ADMIN_PREFIXES = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.",
    "ssl.",
    "ssl_key",
    "socket.",
    "broker.address.",
    "client.dns.lookup",
    "client.rack",
    "enable.ssl.",
    "enable.sasl.",
    "https.",
    "oauth_cb",
    "reconnect.backoff",
    "retry.backoff",
    "api.version.",
    "broker.version.fallback",
)


#: Where librdkafka's log lines of the helper clients safeconsumer creates for itself go.
HELPER_LOG = logging.getLogger("safeconsumer.librdkafka")


def admin_config(config: Mapping[str, Any], role: str = "health") -> dict[str, Any]:
    """The part of a consumer config an admin client of the same cluster takes (security,
    addressing), with ``client.id`` ``<the consumer's>-<role>``.

    A helper client of ours does not push client metrics to the broker (KIP-714,
    ``enable.metrics.push``): it is not the application's client, and the subscription request
    it would make at connect, with the state kept for it, cost about 0.2 MiB per helper here.
    Its librdkafka log lines go to the ``safeconsumer.librdkafka`` logger, never to stderr (without
    a ``logger`` librdkafka prints them there itself)."""
    conf = {k: v for k, v in config.items() if k.startswith(_ADMIN_PREFIXES)}
    client_id = config.get("client.id")
    conf["client.id"] = f"{client_id or 'safeconsumer'}-{role}"
    conf["enable.metrics.push"] = False
    conf["logger"] = HELPER_LOG
    return conf
