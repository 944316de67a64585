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
- ``kafka_version`` (session): the Apache Kafka release of the brokers above, the newest supported
  (:data:`KAFKA_VERSION`) unless the test is marked ``@pytest.mark.kafka_versions``: such a test runs
  once per supported release (:data:`KAFKA_VERSIONS`, test ids ``[4.4.0]``, ``[4.3.1]``), or once per
  release it names (``@pytest.mark.kafka_versions("4.3.1")``), each on brokers of that release.
  Where the brokers are not started from a release's jars (``KAFKA_BOOTSTRAP_SERVERS``,
  ``KAFKA_HOME``), they are one release: ``SAFECONSUMER_KAFKA_VERSION`` names it (default the
  newest), and tests of other releases are deselected (the summary counts them).

A broker that cannot start fails every test that needs it, loudly, with the
reason and the broker log. It never skips: a skipped Kafka test is no evidence.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping

import pytest

from ._broker import Broker, Security, launch_broker
from ._errors import BrokerStartError
from ._kit import KafkaTestKit
from ._local import KAFKA_VERSION, KAFKA_VERSIONS

_Key = tuple[frozenset[tuple[str, str]], Security, str]


class _BrokerPool:
    """Brokers started during this session, keyed by their overrides; failures are cached too."""

    def __init__(self) -> None:
        self._brokers: dict[_Key, Broker] = {}
        self._failures: dict[_Key, str] = {}

    def get(
        self,
        overrides: Mapping[str, str] | None = None,
        *,
        security: Security = "plaintext",
        version: str = KAFKA_VERSION,
    ) -> Broker:
        key = (frozenset((str(k), str(v)) for k, v in (overrides or {}).items()), security, version)
        if key in self._failures:
            pytest.fail(self._failures[key], pytrace=False)
        if key not in self._brokers:
            try:
                self._brokers[key] = launch_broker(dict(key[0]), security=security, version=version)
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kafka_versions(*versions): run the test once per Apache Kafka release (default: every supported one)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mark = metafunc.definition.get_closest_marker("kafka_versions")
    if mark is None:
        return
    if "kafka_version" not in metafunc.fixturenames:
        if not any(m.name == "kafka_versions" for m in metafunc.definition.own_markers):
            return  # a module's mark: this test of it starts no broker
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: marked kafka_versions, but none of its fixtures depends on "
            "kafka_version (its brokers would all be the default release)"
        )
    versions = mark.args or KAFKA_VERSIONS
    unknown = [v for v in versions if v not in KAFKA_VERSIONS]
    if unknown:
        raise pytest.UsageError(f"kafka_versions{tuple(unknown)}: supported releases are {KAFKA_VERSIONS}")
    metafunc.parametrize("kafka_version", list(versions), indirect=True, scope="session")


def _fixed_release() -> str | None:
    """The one Kafka release the session's brokers can be, where it does not start them from a
    version's jars (``KAFKA_BOOTSTRAP_SERVERS``, ``KAFKA_HOME``): ``SAFECONSUMER_KAFKA_VERSION``, else
    the default; None where every supported release can be started."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or os.environ.get("KAFKA_HOME"):
        return os.environ.get("SAFECONSUMER_KAFKA_VERSION") or KAFKA_VERSION
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With a fixed release (:func:`_fixed_release`), a test for another release is deselected (and
    reported as such), never run against brokers of the wrong release."""
    fixed = _fixed_release()
    if fixed is None:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        version = callspec.params.get("kafka_version") if callspec is not None else None
        (dropped if version is not None and version != fixed else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def kafka_version(request: pytest.FixtureRequest) -> str:
    """The Apache Kafka release of this test's brokers (see ``@pytest.mark.kafka_versions``)."""
    return str(getattr(request, "param", _fixed_release() or KAFKA_VERSION))


@pytest.fixture(scope="session")
def kafka_broker(_kafka_pool: _BrokerPool, kafka_version: str) -> Broker:
    """The session's shared broker (one per Kafka release the session's tests ask for)."""
    return _kafka_pool.get(version=kafka_version)


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: Broker) -> str:
    """Bootstrap address of the session's shared broker."""
    return kafka_broker.bootstrap_servers


@pytest.fixture(scope="session")
def kafka_broker_factory(_kafka_pool: _BrokerPool, kafka_version: str) -> Callable[..., Broker]:
    """``factory({"group.max.size": "2"})`` -> a broker with those settings (shared per settings and
    release); ``factory({}, security="sasl_ssl")`` -> a secured broker; ``version=`` another release
    than the test's."""

    def get(
        overrides: Mapping[str, str] | None = None, *, security: Security = "plaintext", version: str | None = None
    ) -> Broker:
        return _kafka_pool.get(overrides, security=security, version=version or kafka_version)

    return get


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
    fixed = _fixed_release()
    image = (
        " (" + ", ".join(f"{version}: {container_image(version)}" for version in KAFKA_VERSIONS) + ")"
        if kind == "container"
        else ""
    )
    releases = (
        f"Kafka {fixed} only (SAFECONSUMER_KAFKA_VERSION; tests of other releases deselected)"
        if fixed
        else f"Kafka {', '.join(KAFKA_VERSIONS)}"
    )
    return f"safeconsumer.testing: Kafka broker source = {kind}{image}; {releases}"
