"""One entry point to a real broker: an existing cluster, a container, or local jars."""

from __future__ import annotations

import logging
import os
import re
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ._container import ContainerBroker, container_image, docker_engine, docker_engine_available
from ._errors import BrokerOverridesUnsupported, BrokerRestartUnsupported, BrokerStartError
from ._kit import kit_client, retry_until
from ._local import KAFKA_VERSION, LocalBroker
from ._secure import DEFAULT_USER, SaslSsl

logger = logging.getLogger(__name__)

BrokerKind = Literal["external", "container", "local"]

#: ``"plaintext"``: one PLAINTEXT listener. ``"sasl_ssl"``: clients connect over SASL_SSL
#: (SCRAM-SHA-512 over TLS, a CA and certificates made at start; local jars only).
Security = Literal["plaintext", "sasl_ssl"]


class _Process(Protocol):
    @property
    def bootstrap_servers(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Broker:
    """A running broker (or an existing cluster) that tests and demos can use.

    ``log_path`` is the broker's log file when this process started the broker
    from local jars; point a failing test at it.
    """

    bootstrap_servers: str
    kind: BrokerKind
    overrides: Mapping[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    pid: int | None = None
    """The broker JVM's process id, when this process started it from local jars."""
    _process: _Process | None = field(default=None, repr=False, compare=False)
    sasl_ssl: SaslSsl | None = None
    """A secured broker's listener, user and CA (``security="sasl_ssl"``); None otherwise."""
    version: str | None = None
    """The Apache Kafka release this process started (None for an existing cluster)."""

    @property
    def client_config(self) -> dict[str, Any]:
        """The settings a client of this broker needs: ``bootstrap.servers``, and on a secured
        broker its security settings and credentials (never logged: a password is among them)."""
        if self.sasl_ssl is not None:
            return self.sasl_ssl.client_config()
        return {"bootstrap.servers": self.bootstrap_servers}

    def stop(self) -> None:
        """Stop the broker if this process started it; an external cluster is left alone."""
        if self._process is not None:
            self._process.stop()

    @contextmanager
    def down(self) -> Iterator[None]:
        """Inside the block the broker is stopped; at its end it starts again on the same
        address and data (brokers this process started: from local jars or in a container).

        Clients see the broker - and the group coordinator on it - go away and come back:
        the way to test what a client does while its coordinator is unavailable or moves.
        """
        process = self._process
        if not isinstance(process, (LocalBroker, ContainerBroker)):
            raise BrokerRestartUnsupported(f"down() needs a broker this process started, not a {self.kind} one")
        process.stop_process()
        try:
            yield
        finally:
            process.start_again()
            address = process.plaintext_bootstrap_servers if isinstance(process, LocalBroker) else None
            wait_ready(address or self.bootstrap_servers, timeout=process.startup_timeout)
            if isinstance(process, LocalBroker):
                object.__setattr__(self, "pid", process.pid)


def wait_ready(bootstrap_servers: str, *, timeout: float) -> None:
    """Wait until the cluster answers a metadata request with a live broker (tenacity: jittered
    backoff, a deadline); raise :class:`BrokerStartError` naming it if it never does."""

    def answer() -> bool:
        conf = {"bootstrap.servers": bootstrap_servers, "socket.connection.setup.timeout.ms": 5000}
        admin = AdminClient(kit_client(conf))
        return bool(admin.list_topics(timeout=5).brokers)

    if not retry_until(
        answer, timeout=timeout, retry_on=lambda exc: isinstance(exc, KafkaException), first=0.1, cap=2.0
    ):
        raise BrokerStartError(f"no Kafka broker answered at {bootstrap_servers} within {timeout:.0f}s")


def choose_kind() -> BrokerKind:
    """Which broker :func:`start_broker` would use here, in order of preference.

    ``SAFECONSUMER_BROKER`` chooses instead of the preference: ``local`` (jars) or
    ``container`` (which then fails when no Docker engine answers, rather than fall back).
    """
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return "external"
    forced = os.environ.get("SAFECONSUMER_BROKER", "").strip().lower()
    if forced == "local":
        return "local"
    if forced == "container":
        return "container"
    if forced:
        raise BrokerStartError(f"SAFECONSUMER_BROKER={forced!r}: expected 'local' or 'container' (or unset)")
    return "container" if docker_engine_available() else "local"


def launch_broker(
    overrides: Mapping[str, str] | None = None,
    *,
    version: str = KAFKA_VERSION,
    startup_timeout: float = 120.0,
    security: Security = "plaintext",
) -> Broker:
    """Start (or reach) a broker and return it; the caller must ``stop()`` it."""
    settings = {str(k): str(v) for k, v in (overrides or {}).items()}
    if security not in ("plaintext", "sasl_ssl"):
        raise ValueError(f"security={security!r}: expected 'plaintext' or 'sasl_ssl'")
    if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"version={version!r}: expected an Apache Kafka release such as {KAFKA_VERSION!r}")
    kind = choose_kind()
    if security == "sasl_ssl" and kind != "local":
        raise BrokerStartError(
            f"security='sasl_ssl' needs a broker started from local jars (SAFECONSUMER_BROKER=local), not a "
            f"{kind} one" + (": unset KAFKA_BOOTSTRAP_SERVERS" if kind == "external" else "")
        )
    if kind == "external":
        if settings:
            raise BrokerOverridesUnsupported(
                f"broker overrides {sorted(settings)} cannot apply to the existing cluster named by "
                "KAFKA_BOOTSTRAP_SERVERS; unset it to let safeconsumer.testing start a broker with them"
            )
        external = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
        wait_ready(external, timeout=startup_timeout)
        return Broker(external, "external")
    process: ContainerBroker | LocalBroker
    if kind == "container":
        if not docker_engine_available():
            raise BrokerStartError(
                f"SAFECONSUMER_BROKER=container, but no Docker engine answers at {docker_engine()} "
                f"(image {container_image(version)!r}); start one, or unset SAFECONSUMER_BROKER to use local jars"
            )
        process = ContainerBroker(settings, version=version)
        process.startup_timeout = startup_timeout
    else:
        process = LocalBroker(
            settings, version=version, startup_timeout=startup_timeout, sasl_ssl=security == "sasl_ssl"
        )
    try:
        process.start()
    except BrokerStartError:
        process.stop()  # a container that was created but did not start is removed, not leaked
        raise
    except Exception as exc:
        process.stop()
        raise BrokerStartError(f"could not start a {kind} Kafka broker: {exc}") from exc
    secured = None
    try:
        if isinstance(process, LocalBroker) and process.tls is not None:
            wait_ready(process.plaintext_bootstrap_servers, timeout=startup_timeout)
            secured = SaslSsl(
                bootstrap_servers=process.bootstrap_servers,
                admin_bootstrap_servers=process.plaintext_bootstrap_servers,
                ca_location=str(process.tls.ca_location),
                username=DEFAULT_USER,
                password=secrets.token_urlsafe(18),
            )
            secured.set_user(secured.username, secured.password, timeout=startup_timeout)
        else:
            wait_ready(process.bootstrap_servers, timeout=startup_timeout)
    except BrokerStartError as exc:
        if isinstance(process, ContainerBroker):
            detail = process.describe_failure()
            process.stop()
            raise BrokerStartError(f"{exc}: {detail}") from exc
        process.stop()
        raise
    pid = process.pid if isinstance(process, LocalBroker) else None
    return Broker(process.bootstrap_servers, kind, settings, process.log_path, pid, process, secured, version)


@contextmanager
def start_broker(
    overrides: Mapping[str, str] | None = None,
    *,
    version: str = KAFKA_VERSION,
    startup_timeout: float = 120.0,
    security: Security = "plaintext",
) -> Iterator[Broker]:
    """Run a real Kafka broker for the duration of the ``with`` block.

    - ``KAFKA_BOOTSTRAP_SERVERS`` set: that cluster is used; ``overrides`` then
      raise :class:`BrokerOverridesUnsupported`, since they cannot apply.
    - else, where a Docker engine answers a ping: a container of Apache's ``apache/kafka``
      image of the same Kafka version (``SAFECONSUMER_KAFKA_IMAGE`` names another), through
      testcontainers, in KRaft mode.
    - else: a single-node KRaft broker from Apache Kafka's jars (``KAFKA_HOME``
      or resolved from Maven Central into a cache).
    - ``SAFECONSUMER_BROKER=local`` or ``=container`` chooses instead of this order.

    Local and container brokers get the same settings table (``_settings.BROKER_SETTINGS``),
    then ``overrides``.

    ``overrides`` are broker settings, e.g. ``{"group.max.size": "2"}``.

    ``security="sasl_ssl"`` (local jars): clients must connect over SASL_SSL with SCRAM-SHA-512;
    ``broker.client_config`` holds what they need (CA, user, password), ``broker.sasl_ssl`` manages
    users (``set_user``, ``delete_user``).
    """
    broker = launch_broker(overrides, version=version, startup_timeout=startup_timeout, security=security)
    try:
        yield broker
    finally:
        broker.stop()
