from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from safeconsumer.testing import KAFKA_VERSION, PROTOCOLS, Broker, KafkaTestKit, Protocol

from .support import FULL_GROUP_LIMITS

# tests/container needs a Docker engine and runs under ``make test-container``
# (SAFECONSUMER_BROKER=container); a plain ``pytest`` collects what ``make test`` runs.
collect_ignore = [] if os.environ.get("SAFECONSUMER_BROKER") == "container" else ["container"]

#: Fixtures that start or reach a real broker: a test using one is marked ``kafka``, so the
#: fast tier (``make check``) can leave it out with ``-m "not kafka"``.
BROKER_FIXTURES = frozenset(
    {
        "kafka",
        "kafka_broker",
        "kafka_bootstrap",
        "kafka_broker_factory",
        "_kafka_pool",
        "full_group_kafka",
        "secured_broker",
        "secured_kafka",
    }
)


#: Fixtures that start a broker with overrides: under ``make test``'s parallel phase the tests using
#: them share one worker (``--dist loadgroup``), so only that worker starts such a broker.
OVERRIDE_BROKER_FIXTURES = frozenset({"kafka_broker_factory", "full_group_kafka", "secured_broker", "secured_kafka"})


# tryfirst: xdist's worker reads the xdist_group marks in its own pytest_collection_modifyitems, and
# a plugin registered after this conftest runs first; marks added after it read them group nothing
# (measured: each worker started its own secured and full-group brokers).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if BROKER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.kafka)
        if OVERRIDE_BROKER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.xdist_group("override-brokers"))
        # A grouped test run on another Kafka release than the default goes to a group of that
        # release: the default release's group is not made twice as long on its one worker.
        callspec = getattr(item, "callspec", None)
        version = callspec.params.get("kafka_version") if callspec is not None else None
        group = item.get_closest_marker("xdist_group")
        if version and version != KAFKA_VERSION and group is not None and group.args:
            item.add_marker(pytest.mark.xdist_group(f"{group.args[0]}@{version}"), append=False)


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> Protocol:
    """Each test using this runs under classic range, classic cooperative-sticky and KIP-848."""
    value: Protocol = request.param
    return value


@pytest.fixture
def full_group_kafka(
    kafka_broker_factory: Callable[[Mapping[str, str]], Broker], request: pytest.FixtureRequest
) -> Iterator[KafkaTestKit]:
    """A test kit on a broker started with :data:`FULL_GROUP_LIMITS` (one per session, shared)."""
    kit = KafkaTestKit(kafka_broker_factory(FULL_GROUP_LIMITS).bootstrap_servers, prefix="full")
    yield kit
    kit.close()


#: The secured broker's settings: every connection re-authenticates every 3 s (KIP-368), so a
#: credential deleted mid-run is refused within seconds, not at the next reconnect.
SECURED_OVERRIDES = {"connections.max.reauth.ms": "3000"}


@pytest.fixture
def secured_broker(kafka_broker_factory: Callable[..., Broker]) -> Broker:
    """A broker whose clients connect over SASL_SSL (SCRAM-SHA-512 over TLS), one per session."""
    return kafka_broker_factory(SECURED_OVERRIDES, security="sasl_ssl")


@pytest.fixture
def secured_kafka(secured_broker: Broker, request: pytest.FixtureRequest) -> Iterator[KafkaTestKit]:
    """A test kit whose clients (and ``consumer_conf``) connect to the secured broker."""
    kit = KafkaTestKit(secured_broker.bootstrap_servers, prefix="sec", client_config=secured_broker.client_config)
    yield kit
    kit.close()


@pytest.fixture
def collector_off() -> Iterator[None]:
    """Only reference counting frees objects during the test (what it shows needs no collection)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    """Clients a test made, closed at its end (one the test closed already is fine)."""
    made: list[Any] = []
    yield made
    for c in made:
        with contextlib.suppress(Exception):  # closed already by the test
            c.close()
