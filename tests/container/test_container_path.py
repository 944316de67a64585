"""The container path on a real Docker engine (``make test-container``; not part of ``make test``).

Run with ``SAFECONSUMER_BROKER=container`` and an image that honours apache/kafka's ``KAFKA_*``
environment (``SAFECONSUMER_KAFKA_IMAGE``; ``make test-container`` builds one locally with
``docker/kafka-local/build.sh``). Without a Docker engine every test here fails: none is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from safeconsumer.testing import Broker, BrokerStartError, KafkaTestKit, launch_broker
from safeconsumer.testing._container import ContainerBroker, container_image, docker_engine_available
from safeconsumer.testing._local import LocalBroker
from safeconsumer.testing._settings import BROKER_SETTINGS


def _broker_config(bootstrap: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("BROKER", "1")
    return {k: str(v.value) for k, v in admin.describe_configs([resource])[resource].result().items()}


def test_the_engine_answers_and_the_session_broker_is_a_container(kafka_broker: Broker) -> None:
    assert docker_engine_available(), "no Docker engine answers: the container path cannot be tested"
    assert kafka_broker.kind == "container", f"the session's broker is {kafka_broker.kind}, not a container"


def test_local_and_container_brokers_run_the_same_settings(
    kafka_broker_factory: Callable[[Mapping[str, str]], Broker],
) -> None:
    overrides = {"group.max.size": "3", "group.consumer.max.size": "3"}
    container = kafka_broker_factory(overrides)
    assert container.kind == "container"
    local = LocalBroker(overrides)
    local.start()
    try:
        on_local, on_container = _broker_config(local.bootstrap_servers), _broker_config(container.bootstrap_servers)
    finally:
        local.stop()
    for key, value in {**BROKER_SETTINGS, **overrides}.items():
        assert on_container[key] == on_local[key] == value, (key, on_local[key], on_container[key])


def test_a_container_broker_goes_down_and_comes_back(
    kafka_broker_factory: Callable[[Mapping[str, str]], Broker],
) -> None:
    broker = kafka_broker_factory({"group.max.size": "4"})
    kit = KafkaTestKit(broker.bootstrap_servers, prefix="down")
    try:
        topic = kit.create_topic(partitions=1)
        kit.produce(topic, 5, partitions=1)
        with broker.down(), pytest.raises(KafkaException, match="_TRANSPORT"):
            AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=2)
        assert kit.end_offsets(topic) == {0: 5}, "the data did not survive the restart"
    finally:
        kit.close()


def test_an_image_that_cannot_be_had_fails_naming_the_image_and_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFECONSUMER_KAFKA_IMAGE", "safeconsumer/no-such-kafka:0")
    with pytest.raises(BrokerStartError) as raised:
        launch_broker({}, startup_timeout=30)
    message = str(raised.value)
    assert "safeconsumer/no-such-kafka:0" in message and "Docker engine at" in message, message
    assert "SAFECONSUMER_KAFKA_IMAGE" in message


def test_a_container_whose_broker_never_answers_fails_with_its_output(monkeypatch: pytest.MonkeyPatch) -> None:
    # node.id must be a number: the broker exits at once; the error carries the container's output.
    with pytest.raises(BrokerStartError) as raised:
        launch_broker({"node.id": "not-a-number"}, startup_timeout=20)
    message = str(raised.value)
    assert container_image() in message and "Invalid value not-a-number" in message, message[-2000:]


def test_the_engine_must_answer_when_the_container_path_is_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    with pytest.raises(BrokerStartError, match=r"no Docker engine answers at tcp://127\.0\.0\.1:1"):
        launch_broker({})
    assert isinstance(ContainerBroker().image, str)
