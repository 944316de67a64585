"""The one table of broker settings every broker kind gets (local jars and containers alike).

A test that passes on the local broker must behave the same on a container: both are started
from :data:`BROKER_SETTINGS`, then the single-node KRaft layout of :func:`node_settings`, then
the caller's overrides (later keys win). The local launcher writes them to ``server.properties``;
a container gets them as environment variables by Apache's image contract (:func:`apache_env`).
"""

from __future__ import annotations

from collections.abc import Mapping

#: Broker settings that keep one test broker small and fast on two cores, and allow the short
#: session and heartbeat timeouts that tests use.
BROKER_SETTINGS: Mapping[str, str] = {
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "500",
    # Share groups: short acquisition locks and sessions may be set per group by tests (the
    # broker's minimums are 15 s each otherwise); members heartbeat often, as consumer groups do.
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.min.session.timeout.ms": "1000",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "500",
    "log.cleaner.dedupe.buffer.size": "2097152",
    "num.network.threads": "1",
    "num.io.threads": "1",
    "num.recovery.threads.per.data.dir": "1",
    "background.threads": "2",
    "group.coordinator.threads": "1",
    # A node starved of CPU for 9 s (the default) under a parallel suite on two cores missed its
    # heartbeats to the KRaft controller and was fenced: "All brokers are currently fenced".
    "broker.session.timeout.ms": "30000",
}

#: Environment variables of Apache's image that are not broker settings.
NOT_SETTINGS = frozenset(
    {
        "KAFKA_HEAP_OPTS",
        "KAFKA_JVM_PERFORMANCE_OPTS",
        "KAFKA_OPTS",
        "KAFKA_GC_LOG_OPTS",
        "KAFKA_JMX_OPTS",
        "KAFKA_LOG4J_OPTS",
        "KAFKA_LOG4J_ROOT_LOGLEVEL",
        "KAFKA_LOG4J_LOGGERS",
        "KAFKA_DEBUG",
        "KAFKA_VERSION",
    }
)


def node_settings(
    *, listen: str, advertise: str, port: int, controller_port: int, log_dirs: str, dynamic_quorum: bool
) -> dict[str, str]:
    """A single node that is broker and controller: clients on ``listen:port`` (advertised as
    ``advertise:port``), the controller on 127.0.0.1 inside the node.

    ``dynamic_quorum``: a KIP-853 quorum (``controller.quorum.bootstrap.servers``; the storage is
    formatted ``--standalone``), as the local launcher does; otherwise the static
    ``controller.quorum.voters``, which any image's own formatting accepts.
    """
    quorum = (
        {"controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}"}
        if dynamic_quorum
        else {"controller.quorum.voters": f"1@127.0.0.1:{controller_port}"}
    )
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": f"PLAINTEXT://{listen}:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{advertise}:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        **quorum,
        "log.dirs": log_dirs,
    }


def broker_node_settings(*, node_id: int, port: int, controller_port: int, log_dirs: str) -> dict[str, str]:
    """A broker-only node ``node_id`` on ``127.0.0.1:port`` that joins the cluster whose single
    controller listens on ``127.0.0.1:controller_port`` (a second broker, for tests that move
    partition leaders: the group coordinator moves with its offsets partition)."""
    return {
        "process.roles": "broker",
        "node.id": str(node_id),
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "log.dirs": log_dirs,
    }


def broker_settings(node: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The table, then the node's layout, then the overrides."""
    return {**BROKER_SETTINGS, **node, **{str(k): str(v) for k, v in overrides.items()}}


def apache_env(settings: Mapping[str, str]) -> dict[str, str]:
    """Settings as Apache's ``apache/kafka`` image reads them from its environment.

    ``KAFKA_`` + the key upper-cased with ``_`` -> ``__``, ``-`` -> ``___`` and ``.`` -> ``_``
    (so ``group.max.size`` is ``KAFKA_GROUP_MAX_SIZE``).
    """
    env = {}
    for key, value in settings.items():
        name = "KAFKA_" + key.replace("_", "__").replace("-", "___").replace(".", "_").upper()
        if name in NOT_SETTINGS:
            raise ValueError(f"broker setting {key!r} cannot be passed to the image: {name} means something else")
        env[name] = str(value)
    return env


def settings_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """The inverse of :func:`apache_env`: what a container makes of its ``KAFKA_*`` environment."""
    out = {}
    for name, value in env.items():
        if not name.startswith("KAFKA_") or name in NOT_SETTINGS:
            continue
        key = name[len("KAFKA_") :].lower().replace("___", "\0").replace("__", "\1").replace("_", ".")
        out[key.replace("\0", "-").replace("\1", "_")] = value
    return out
