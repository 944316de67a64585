"""Pure pieces of the broker launcher."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from safeconsumer.testing._container import DEFAULT_IMAGE, ContainerBroker, container_image, env_for
from safeconsumer.testing._local import KAFKA_VERSION, LocalBroker, _cluster_id
from safeconsumer.testing._settings import BROKER_SETTINGS, apache_env, broker_node_settings, settings_from_env


def test_cluster_ids_never_look_like_options() -> None:
    ids = {_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)


def test_a_second_broker_joins_the_first_nodes_controller_as_a_broker_only() -> None:
    node = broker_node_settings(node_id=2, port=9093, controller_port=9999, log_dirs="/d")
    assert node["process.roles"] == "broker" and node["node.id"] == "2"
    assert node["controller.quorum.bootstrap.servers"] == "127.0.0.1:9999"
    assert node["listeners"] == node["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9093"
    assert "controller.quorum.voters" not in node


def test_a_joining_node_needs_a_running_first_node_and_its_own_id() -> None:
    first = LocalBroker()
    try:
        with pytest.raises(ValueError, match="started first node"):
            LocalBroker(joins=first, node_id=2)
    finally:
        shutil.rmtree(first.workdir)


def test_container_env_names_follow_the_image_convention() -> None:
    assert env_for({"group.max.size": "2", "group.consumer.max.size": 3}) == {  # type: ignore[dict-item]
        "KAFKA_GROUP_MAX_SIZE": "2",
        "KAFKA_GROUP_CONSUMER_MAX_SIZE": "3",
    }


# -- the container path's environment contract (no Docker needed) --------------------------------

_RUN = Path(__file__).resolve().parents[2] / "docker" / "kafka-local" / "run"


def _image_properties(env: Mapping[str, str]) -> dict[str, str]:
    """What the locally built image's entrypoint makes of ``env`` (``run --print-properties``)."""
    out = subprocess.run(
        ["bash", str(_RUN), "--print-properties"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_the_environment_contract_round_trips() -> None:
    settings = {"group.max.size": "2", "log.dirs": "/d", "a_b.c-d": "x", "listener.security.protocol.map": "A:B"}
    env = apache_env(settings)
    assert env["KAFKA_GROUP_MAX_SIZE"] == "2" and env["KAFKA_A__B_C___D"] == "x"
    assert settings_from_env(env) == settings
    with pytest.raises(ValueError, match="KAFKA_OPTS"):
        apache_env({"opts": "1"})


def test_the_default_image_is_apaches_of_the_local_brokers_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAFECONSUMER_KAFKA_IMAGE", raising=False)
    assert DEFAULT_IMAGE == f"apache/kafka:{KAFKA_VERSION}" == container_image()
    monkeypatch.setenv("SAFECONSUMER_KAFKA_IMAGE", "registry.example/kafka:x")
    assert container_image() == "registry.example/kafka:x"


def test_a_container_gets_the_table_its_layout_and_the_overrides() -> None:
    overrides = {"group.max.size": "3", "num.io.threads": "2"}
    env = ContainerBroker(overrides, image="any").environment(port=19092, host="127.0.0.1")
    settings = settings_from_env(env)
    for key, value in {**BROKER_SETTINGS, **overrides}.items():
        assert settings[key] == value, key
    assert settings["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert set(env) - {"CLUSTER_ID"} == set(apache_env(settings))


def test_the_local_images_entrypoint_honours_the_same_contract() -> None:
    env = ContainerBroker({"group.max.size": "2", "a_b.c-d": "x"}, image="any").environment(port=19092, host="h")
    # Variables that are JVM options, not settings, never reach server.properties, as in Apache's image.
    assert _image_properties({**env, "KAFKA_HEAP_OPTS": "-Xmx1g", "KAFKA_VERSION": "9"}) == settings_from_env(env)
