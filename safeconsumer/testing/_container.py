"""A Kafka broker in a container, through testcontainers, where a Docker engine answers.

The image is Apache's own ``apache/kafka`` at the local launcher's Kafka version by default;
``SAFECONSUMER_KAFKA_IMAGE`` names another one that honours the same ``KAFKA_*`` environment
contract (``docker/kafka-local/build.sh`` builds one without a registry). The broker gets the
settings table every broker kind gets (:mod:`._settings`) plus the overrides, as environment
variables. The container's client port is published on the same port number of the engine's
host, so the advertised address is the one clients reach.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

from ._errors import BrokerStartError
from ._local import KAFKA_VERSION, _cluster_id, _free_port
from ._settings import apache_env, broker_settings, node_settings

logger = logging.getLogger(__name__)

#: Apache's image of the same Kafka version the local launcher runs by default.
DEFAULT_IMAGE = f"apache/kafka:{KAFKA_VERSION}"

#: Inside the container only: the KRaft controller's port, and where the data lives.
_CONTROLLER_PORT = 9093
_LOG_DIRS = "/tmp/kraft-combined-logs"


def image_variable(version: str = KAFKA_VERSION) -> str:
    """The environment variable naming the image for Kafka ``version``: ``SAFECONSUMER_KAFKA_IMAGE``
    for the default version, ``SAFECONSUMER_KAFKA_IMAGE_4_3_1`` for 4.3.1."""
    if version != KAFKA_VERSION:
        return f"SAFECONSUMER_KAFKA_IMAGE_{version.replace('.', '_')}"
    return "SAFECONSUMER_KAFKA_IMAGE"


def container_image(version: str = KAFKA_VERSION) -> str:
    """The image the container path runs for Kafka ``version``: the one :func:`image_variable` names,
    else Apache's ``apache/kafka:<version>``."""
    return os.environ.get(image_variable(version)) or f"apache/kafka:{version}"


def docker_engine() -> str:
    """The engine address testcontainers uses (``DOCKER_HOST``, else the default socket)."""
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def docker_engine_available(timeout: float = 2.0) -> bool:
    """True when a Docker *engine* answers ``GET /_ping`` (a ``docker`` client alone is not enough).

    Reads ``DOCKER_HOST`` (``unix://`` or ``tcp://``), else the default socket.
    """
    host = docker_engine()
    family: int
    address: str | tuple[str, int]
    if host.startswith("unix://"):
        path = host[len("unix://") :]
        if not os.path.exists(path):
            return False
        family, address = socket.AF_UNIX, path
    elif host.startswith("tcp://"):
        hostname, _, port = host[len("tcp://") :].partition(":")
        family, address = socket.AF_INET, (hostname, int(port or 2375))
    else:
        return False
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = sock.recv(64)
    except OSError:
        return False
    return reply.startswith(b"HTTP/") and b" 200 " in reply


def env_for(overrides: Mapping[str, str]) -> dict[str, str]:
    """Broker settings as Apache's image reads them: ``group.max.size`` -> ``KAFKA_GROUP_MAX_SIZE``."""
    return apache_env({str(k): str(v) for k, v in overrides.items()})


def _engine_host() -> str:
    """Where the engine publishes ports: its ``tcp://`` host, else this machine."""
    host = docker_engine()
    if host.startswith("tcp://"):
        return host[len("tcp://") :].rpartition(":")[0] or "127.0.0.1"
    return "127.0.0.1"


class ContainerBroker:
    """One KRaft node (broker and controller) in a container, with the given broker overrides."""

    log_path = None

    def __init__(
        self, overrides: Mapping[str, str] | None = None, *, image: str | None = None, version: str = KAFKA_VERSION
    ) -> None:
        self.overrides = dict(overrides or {})
        self.version = version
        self.image = image or container_image(version)
        self._container: Any = None
        self.bootstrap_servers = ""
        self.port = 0
        self.startup_timeout = 120.0

    def environment(self, port: int, host: str) -> dict[str, str]:
        """The container's environment: the shared table, the node's layout, the overrides."""
        node = node_settings(
            listen="0.0.0.0",
            advertise=host,
            port=port,
            controller_port=_CONTROLLER_PORT,
            log_dirs=_LOG_DIRS,
            dynamic_quorum=False,
        )
        return {**apache_env(broker_settings(node, self.overrides)), "CLUSTER_ID": _cluster_id()}

    def start(self) -> None:
        from testcontainers.core.container import DockerContainer

        host = _engine_host()
        self.port = _free_port()
        container = DockerContainer(self.image).with_bind_ports(self.port, self.port)
        for key, value in self.environment(self.port, host).items():
            container = container.with_env(key, value)
        try:
            container.start()
        except Exception as exc:
            self._container = container
            raise BrokerStartError(
                f"the Kafka container did not start: image {self.image!r} on the Docker engine at "
                f"{docker_engine()}: {type(exc).__name__}: {exc}. Name another image with "
                f"{image_variable(self.version)} (it must honour apache/kafka's KAFKA_* environment), or run "
                "the broker from local jars with SAFECONSUMER_BROKER=local."
            ) from exc
        self._container = container
        self.bootstrap_servers = f"{host}:{self.port}"
        logger.info("Kafka container %s started on %s", self.image, self.bootstrap_servers)

    def describe_failure(self) -> str:
        """What to tell the user when the container started but no broker answered."""
        return (
            f"image {self.image!r} on the Docker engine at {docker_engine()}; the container's last output:\n"
            f"{self.logs_tail()}"
        )

    def logs_tail(self, chars: int = 3000) -> str:
        container = self._container
        if container is None:
            return "(no container)"
        try:
            out, err = container.get_logs()
        except Exception as exc:  # noqa: BLE001 - best effort, for an error message
            return f"(logs unavailable: {exc})"
        return str((out + err).decode(errors="replace"))[-chars:]

    def stop_process(self) -> None:
        """Stop the container, keeping it (its data and published port) for :meth:`start_again`."""
        self._container.get_wrapped_container().stop(timeout=20)

    def start_again(self) -> None:
        self._container.get_wrapped_container().start()

    def stop(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            try:
                container.stop()
            except Exception as exc:  # noqa: BLE001 - a container already gone is stopped
                logger.warning("could not remove the Kafka container: %s", exc)
