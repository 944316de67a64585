"""pytest plugin, opt-in: a real Kafka broker for every test that asks.

Installing safeconsumer changes nobody's test runs. A project opts in with
``pytest -p safeconsumer.testing``, ``addopts = "-p safeconsumer.testing"`` in its pytest
configuration, or ``pytest_plugins = ["safeconsumer.testing"]`` in its top-level conftest.py.

Fixtures:

- ``kafka_broker`` (session): the :class:`Broker` all tests share.
- ``kafka_bootstrap`` (session): its bootstrap address.
- ``kafka_broker_factory`` (session): ``factory(overrides)`` -> a broker with those
  settings, started once per distinct overrides and stopped at session end;
  ``factory(overrides, security="sasl_ssl")`` -> a secured one (SCRAM-SHA-512 over TLS: clients
  take ``broker.client_config``).
- ``kafka`` (function): a :class:`KafkaTestKit` on the shared broker whose names
  carry the test's name, for topics, records and group state.

A broker that cannot start fails every test that needs it, loudly, with the
reason and the broker log. It never skips: a skipped Kafka test is no evidence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping

import pytest

from ._broker import Broker, Security, launch_broker
from ._errors import BrokerStartError
from ._kit import KafkaTestKit


class _BrokerPool:
    """Brokers started during this session, keyed by their overrides; failures are cached too."""

    def __init__(self) -> None:
        self._brokers: dict[tuple[frozenset[tuple[str, str]], Security], Broker] = {}
        self._failures: dict[tuple[frozenset[tuple[str, str]], Security], str] = {}

    def get(self, overrides: Mapping[str, str] | None = None, *, security: Security = "plaintext") -> Broker:
        key = (frozenset((str(k), str(v)) for k, v in (overrides or {}).items()), security)
        if key in self._failures:
            pytest.fail(self._failures[key], pytrace=False)
        if key not in self._brokers:
            try:
                self._brokers[key] = launch_broker(dict(key[0]), security=security)
            except BrokerStartError as exc:
                self._failures[key] = f"no Kafka broker could be started: {exc}"
                pytest.fail(self._failures[key], pytrace=False)
        return self._brokers[key]

    def stop_all(self) -> None:
        for broker in self._brokers.values():
            broker.stop()
        self._brokers.clear()


@pytest.fixture(scope="session")
def _kafka_pool() -> Iterator[_BrokerPool]:
    pool = _BrokerPool()
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture(scope="session")
def kafka_broker(_kafka_pool: _BrokerPool) -> Broker:
    """The session's shared broker."""
    return _kafka_pool.get()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: Broker) -> str:
    """Bootstrap address of the session's shared broker."""
    return kafka_broker.bootstrap_servers


@pytest.fixture(scope="session")
def kafka_broker_factory(_kafka_pool: _BrokerPool) -> Callable[..., Broker]:
    """``factory({"group.max.size": "2"})`` -> a broker with those settings (shared per settings);
    ``factory({}, security="sasl_ssl")`` -> a secured broker."""
    return _kafka_pool.get


@pytest.fixture
def kafka(kafka_broker: Broker, request: pytest.FixtureRequest) -> Iterator[KafkaTestKit]:
    """Helpers on the shared broker; topic and group names carry this test's name."""
    prefix = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:60]
    kit = KafkaTestKit(kafka_broker.bootstrap_servers, prefix=prefix)
    try:
        yield kit
    finally:
        kit.close()


def pytest_report_header(config: pytest.Config) -> str:
    from ._broker import choose_kind
    from ._container import container_image

    try:
        kind = choose_kind()
    except BrokerStartError as exc:
        return f"safeconsumer.testing: Kafka broker source = none ({exc})"
    image = f" ({container_image()})" if kind == "container" else ""
    return f"safeconsumer.testing: Kafka broker source = {kind}{image}"
