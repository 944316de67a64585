"""A Kafka broker in a container, through testcontainers, where a Docker engine answers."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

#: Confluent Platform 8.1 ships Apache Kafka 4.1 in KRaft mode; the tag is pinned.
CONTAINER_IMAGE = "confluentinc/cp-kafka:8.1.0"


def docker_engine_available(timeout: float = 2.0) -> bool:
    """True when a Docker *engine* answers ``GET /_ping`` (a ``docker`` client alone is not enough).

    Reads ``DOCKER_HOST`` (``unix://`` or ``tcp://``), else the default socket.
    """
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
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
    """Broker settings as the cp-kafka image reads them: ``group.max.size`` -> ``KAFKA_GROUP_MAX_SIZE``."""
    return {"KAFKA_" + key.upper().replace(".", "_"): str(value) for key, value in overrides.items()}


class ContainerBroker:
    """A testcontainers ``KafkaContainer`` in KRaft mode with the given broker overrides."""

    log_path = None

    def __init__(self, overrides: Mapping[str, str] | None = None, *, image: str = CONTAINER_IMAGE) -> None:
        self.overrides = dict(overrides or {})
        self.image = image
        self._container: Any = None
        self.bootstrap_servers = ""

    def start(self) -> None:
        from testcontainers.community.kafka import KafkaContainer

        container = KafkaContainer(self.image).with_kraft()
        for key, value in env_for({"group.initial.rebalance.delay.ms": "0", **self.overrides}).items():
            container = container.with_env(key, value)
        container.start()
        self._container = container
        self.bootstrap_servers = str(container.get_bootstrap_server())
        logger.info("Kafka container %s started on %s", self.image, self.bootstrap_servers)

    def stop(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            container.stop()
