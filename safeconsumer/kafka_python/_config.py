"""kafka-python's consumer configs, judged as kafka-python judges them and translated to librdkafka's.

Every key of kafka-python's ``KafkaConsumer.DEFAULT_CONFIG`` (read from the installed package, never
copied) has one row in :data:`_RULES`: the librdkafka property it becomes, how its value is turned
into that property's, or that only kafka-python's default can be honoured. A key kafka-python does
not know raises its own ``KafkaConfigurationError("Unrecognized configs: ...")``; a value librdkafka
cannot honour raises ``KafkaConfigurationError`` naming the key and why. Nothing is dropped silently.

Keys that stay with the adapter (deserializers, ``max_poll_records``, ``consumer_timeout_ms``, the
default commit callback, request and bootstrap timeouts) are kept in :class:`Settings`.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.consumer.group import KafkaConsumer as _Upstream
from kafka.errors import KafkaConfigurationError

__all__ = ["GROUP_PROTOCOLS", "Settings", "judge"]

#: ``group_protocol``: kafka-python's own protocol, or KIP-848's (which kafka-python lacks).
GROUP_PROTOCOLS = ("classic", "consumer")

#: kafka-python's defaults, from the installed package.
DEFAULTS: Mapping[str, Any] = _Upstream.DEFAULT_CONFIG

#: librdkafka's floor for message.max.bytes, which fetch.max.bytes may not be below.
_LIBRDKAFKA_MIN_FETCH_BYTES = 1000

#: The properties the group coordinator owns under KIP-848: librdkafka refuses them there.
_CLASSIC_ONLY = ("session_timeout_ms", "heartbeat_interval_ms", "partition_assignment_strategy")

#: kafka-python's assignors by their protocol name, and the librdkafka strategies given as strings.
_ASSIGNORS = {"range": "range", "roundrobin": "roundrobin", "cooperative-sticky": "cooperative-sticky"}


@dataclass
class Settings:
    """A judged kafka-python config: librdkafka's config and what the adapter itself keeps."""

    #: Everything kafka-python was given, defaults filled in (what ``consumer.config`` shows).
    config: dict[str, Any]
    #: The librdkafka config of the SafeConsumer underneath.
    librdkafka: dict[str, Any] = field(default_factory=dict)
    #: ``group_id=None``: no group, no commits; a subscription is served by assigning every partition.
    groupless: bool = False


def _ms(key: str) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise KafkaConfigurationError(f"{key} must be a non-negative number of milliseconds, got {value!r}")
        return int(value)

    return convert


def _same(value: Any) -> Any:
    return value


def _servers(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return ",".join(value)
    raise KafkaConfigurationError(f"bootstrap_servers must be a 'host:port' string or a list of them, got {value!r}")


def _offset_reset(value: Any) -> str:
    # kafka-python's own aliases; anything else means "no reset": NoOffsetForPartitionError later.
    return {"earliest": "earliest", "smallest": "earliest", "latest": "latest", "largest": "latest"}.get(value, "error")


def _isolation(value: Any) -> str:
    if value not in ("read_uncommitted", "read_committed"):
        raise KafkaConfigurationError("Unrecognized isolation_level")
    return str(value)


def _hostname_check(value: Any) -> str:
    return "https" if value else "none"


def _dns_lookup(value: Any) -> str:
    if value not in ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"):
        raise KafkaConfigurationError(f"client_dns_lookup must be use_all_dns_ips or ..._only, got {value!r}")
    return str(value)


def _strategy(value: Any) -> str:
    names = []
    for assignor in value if isinstance(value, list | tuple) else [value]:
        name = assignor if isinstance(assignor, str) else getattr(assignor, "name", None)
        if name not in _ASSIGNORS:
            raise KafkaConfigurationError(
                f"partition_assignment_strategy: librdkafka has no assignor {name!r} (it has range, roundrobin"
                " and cooperative-sticky; kafka-python's eager 'sticky' has no librdkafka counterpart)"
            )
        names.append(_ASSIGNORS[name])
    return ",".join(names)


def _api_version(value: Any) -> str | None:
    # librdkafka asks each broker for its API versions, as kafka-python does with api_version=None;
    # a pinned version from 0.10 on means the same features on a broker that answers. Only a broker
    # older than 0.10 cannot answer: librdkafka is then told its version.
    if value is None:
        return None
    if not isinstance(value, tuple) or not value or not all(isinstance(v, int) for v in value):
        raise KafkaConfigurationError(f"api_version must be a tuple of ints such as (2, 8, 0), got {value!r}")
    if value >= (0, 10):
        return None
    return ".".join(str(v) for v in (*value, 0, 0)[: max(3, len(value))])


def _socket_options(value: Any) -> bool:
    if list(value) != [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]:
        raise KafkaConfigurationError(
            "socket_options: librdkafka sets its own socket options; only TCP_NODELAY (the default) is honoured"
        )
    return True


#: key -> (librdkafka property or None, converter). None as property: the adapter keeps the value.
_RULES: dict[str, tuple[str | None, Callable[[Any], Any]]] = {
    "bootstrap_servers": ("bootstrap.servers", _servers),
    "client_id": ("client.id", str),
    "client_rack": ("client.rack", str),
    "group_id": (None, _same),
    "group_instance_id": ("group.instance.id", str),
    "key_deserializer": (None, _same),
    "value_deserializer": (None, _same),
    "fetch_max_wait_ms": ("fetch.wait.max.ms", _ms("fetch_max_wait_ms")),
    "fetch_min_bytes": ("fetch.min.bytes", int),
    "fetch_max_bytes": (None, int),  # with message.max.bytes and receive.message.max.bytes, below
    "max_partition_fetch_bytes": ("max.partition.fetch.bytes", int),
    "request_timeout_ms": ("socket.timeout.ms", _ms("request_timeout_ms")),
    "retry_backoff_ms": ("retry.backoff.ms", _ms("retry_backoff_ms")),
    "reconnect_backoff_ms": ("reconnect.backoff.ms", _ms("reconnect_backoff_ms")),
    "reconnect_backoff_max_ms": ("reconnect.backoff.max.ms", _ms("reconnect_backoff_max_ms")),
    "max_in_flight_requests_per_connection": ("max.in.flight.requests.per.connection", int),
    "auto_offset_reset": ("auto.offset.reset", _offset_reset),
    "enable_auto_commit": ("enable.auto.commit", bool),
    "auto_commit_interval_ms": ("auto.commit.interval.ms", _ms("auto_commit_interval_ms")),
    "default_offset_commit_callback": (None, _same),
    "check_crcs": ("check.crcs", bool),
    "isolation_level": ("isolation.level", _isolation),
    "allow_auto_create_topics": ("allow.auto.create.topics", bool),
    "metadata_max_age_ms": ("metadata.max.age.ms", _ms("metadata_max_age_ms")),
    "client_dns_lookup": ("client.dns.lookup", _dns_lookup),
    "partition_assignment_strategy": ("partition.assignment.strategy", _strategy),
    "max_poll_records": (None, int),
    "max_poll_interval_ms": ("max.poll.interval.ms", _ms("max_poll_interval_ms")),
    "session_timeout_ms": ("session.timeout.ms", _ms("session_timeout_ms")),
    "heartbeat_interval_ms": ("heartbeat.interval.ms", _ms("heartbeat_interval_ms")),
    "receive_buffer_bytes": ("socket.receive.buffer.bytes", int),
    "send_buffer_bytes": ("socket.send.buffer.bytes", int),
    "receive_message_max_bytes": (None, int),
    "socket_options": ("socket.nagle.disable", _socket_options),
    "consumer_timeout_ms": (None, _same),
    "security_protocol": ("security.protocol", str),
    "ssl_check_hostname": ("ssl.endpoint.identification.algorithm", _hostname_check),
    "ssl_cafile": ("ssl.ca.location", str),
    "ssl_certfile": ("ssl.certificate.location", str),
    "ssl_keyfile": ("ssl.key.location", str),
    "ssl_crlfile": ("ssl.crl.location", str),
    "ssl_password": ("ssl.key.password", str),
    "ssl_ciphers": ("ssl.cipher.suites", str),
    "api_version": ("broker.version.fallback", _api_version),
    "bootstrap_timeout_ms": (None, _ms("bootstrap_timeout_ms")),
    "connections_max_idle_ms": ("connections.max.idle.ms", _ms("connections_max_idle_ms")),
    "metrics_enabled": (None, bool),
    "sasl_mechanism": ("sasl.mechanism", str),
    "sasl_plain_username": ("sasl.username", str),
    "sasl_plain_password": ("sasl.password", str),
    "sasl_kerberos_name": ("sasl.kerberos.principal", str),
    "sasl_kerberos_service_name": ("sasl.kerberos.service.name", str),
    "sasl_oauth_token_provider": (None, _same),
    # librdkafka fetches without KIP-227 sessions: a full fetch each time, the same records either way.
    "enable_incremental_fetch_sessions": (None, bool),
}

#: Keys whose only honourable value is kafka-python's default, and why.
_METRICS = "metrics() reports librdkafka's and safeconsumer's counters, not kafka-python's sensors"
_DEFAULT_ONLY = {
    "ssl_context": "librdkafka makes its own TLS context from ssl_cafile/ssl_certfile/ssl_keyfile",
    "metric_reporters": _METRICS,
    "metrics_num_samples": _METRICS,
    "metrics_sample_window_ms": _METRICS,
    "metric_group_prefix": _METRICS,
    "selector": "librdkafka does its own network I/O",
    "kafka_client": "librdkafka is the client",
    "exclude_internal_topics": "librdkafka never matches internal topics with a pattern subscription",
    "sasl_kerberos_domain_name": "librdkafka derives the broker's Kerberos host from its address",
    "proxy_url": "librdkafka connects directly",
    "socks5_proxy": "librdkafka connects directly",
}


def judge(topics: tuple[Any, ...], configs: Mapping[str, Any], *, group_protocol: str) -> Settings:
    """kafka-python's checks of its constructor, in its order, then the translation."""
    unknown = set(configs).difference(DEFAULTS)
    if unknown:
        raise KafkaConfigurationError(f"Unrecognized configs: {unknown}")
    config = {**DEFAULTS, **configs}
    if not (config["fetch_max_wait_ms"] < config["request_timeout_ms"] < config["connections_max_idle_ms"]):
        raise KafkaConfigurationError(
            "connections_max_idle_ms ({}) must be larger than request_timeout_ms ({}) which must be larger than"
            " fetch_max_wait_ms ({}).".format(
                config["connections_max_idle_ms"], config["request_timeout_ms"], config["fetch_max_wait_ms"]
            )
        )
    if config["group_instance_id"] is not None and config["group_id"] is None:
        raise KafkaConfigurationError("group_instance_id requires group_id")
    if group_protocol not in GROUP_PROTOCOLS:
        raise KafkaConfigurationError(f"group_protocol must be 'classic' or 'consumer', got {group_protocol!r}")
    for key, why in _DEFAULT_ONLY.items():
        if key in configs and configs[key] != DEFAULTS[key]:
            raise KafkaConfigurationError(f"{key} cannot be honoured: {why}")
    settings = Settings(config=config, groupless=config["group_id"] is None)
    out = settings.librdkafka
    for key, (prop, convert) in _RULES.items():
        value = config[key]
        if prop is None or value is None or (key == "client_rack" and not value):
            continue
        if group_protocol == "consumer" and key in _CLASSIC_ONLY:
            if key in configs:
                raise KafkaConfigurationError(
                    f"{key} cannot be set with group_protocol='consumer': the group coordinator owns it (KIP-848)"
                )
            continue
        converted = convert(value)
        if converted is not None:
            out[prop] = converted
    _fetch_sizes(config, out)
    if group_protocol == "consumer":
        out["group.protocol"] = "consumer"
    if settings.groupless:
        # librdkafka wants a group id even for assign(); this one never joins and never commits.
        out["group.id"] = f"safeconsumer-no-group-{uuid.uuid4().hex}"
        out["enable.auto.commit"] = False
    else:
        out["group.id"] = config["group_id"]
    for topic in topics:
        if not isinstance(topic, str):
            raise TypeError(f"topics must be str, got {type(topic).__name__}")
    return settings


def _fetch_sizes(config: Mapping[str, Any], out: dict[str, Any]) -> None:
    """fetch_max_bytes and receive_message_max_bytes as librdkafka takes them: fetch.max.bytes may not
    be below message.max.bytes (at least 1000), and a response may be up to a partition's fetch larger."""
    fetch_max = max(int(config["fetch_max_bytes"]), _LIBRDKAFKA_MIN_FETCH_BYTES)
    out["fetch.max.bytes"] = fetch_max
    if fetch_max < 1_000_000:  # librdkafka's default message.max.bytes
        out["message.max.bytes"] = fetch_max
    receive = max(int(config["receive_message_max_bytes"]), fetch_max + int(config["max_partition_fetch_bytes"]))
    out["receive.message.max.bytes"] = receive + 512  # librdkafka's own margin for the protocol framing
