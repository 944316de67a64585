"""Real Kafka brokers for tests, demos and development; also an opt-in pytest plugin.

Opt in with ``pytest -p safeconsumer.testing`` (or ``pytest_plugins = ["safeconsumer.testing"]``
in a top-level conftest.py): the fixtures ``kafka_broker``, ``kafka_bootstrap``,
``kafka_broker_factory`` and ``kafka``, and a report-header line. Nothing is registered otherwise.

>>> from safeconsumer.testing import start_broker
>>> with start_broker(overrides={"group.max.size": "2"}) as broker:  # doctest: +SKIP
...     broker.bootstrap_servers
'127.0.0.1:40123'
"""

from __future__ import annotations

from ._broker import Broker, Security, choose_kind, launch_broker, start_broker
from ._errors import BrokerOverridesUnsupported, BrokerRestartUnsupported, BrokerStartError
from ._kit import (
    PROTOCOLS,
    GroupSnapshot,
    KafkaTestKit,
    MemberSnapshot,
    Protocol,
    WaitTimeout,
    consumer_generation,
    protocol_conf,
    unique_name,
    wait_until,
)
from ._local import KAFKA_VERSION, kafka_lib_dir
from ._secure import SaslSsl

#: Opting in to ``safeconsumer.testing`` (``-p`` or ``pytest_plugins``) loads the plugin module;
#: without pytest this is an inert list.
pytest_plugins = ["safeconsumer.testing.plugin"]

__all__ = [
    "Broker",
    "BrokerOverridesUnsupported",
    "BrokerRestartUnsupported",
    "BrokerStartError",
    "GroupSnapshot",
    "KAFKA_VERSION",
    "KafkaTestKit",
    "MemberSnapshot",
    "PROTOCOLS",
    "Protocol",
    "SaslSsl",
    "Security",
    "WaitTimeout",
    "choose_kind",
    "consumer_generation",
    "kafka_lib_dir",
    "launch_broker",
    "protocol_conf",
    "start_broker",
    "unique_name",
    "wait_until",
]
