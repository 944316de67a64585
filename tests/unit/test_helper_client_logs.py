"""The clients safeconsumer creates for itself log through ``logging``, never to stderr.

No broker: a bootstrap address nothing listens on makes librdkafka log a refused connection.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from safeconsumer._health import admin_config
from safeconsumer.testing import wait_until

NOWHERE = {"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 10}


def _refused(conf: dict[str, Any]) -> None:
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=0.5)
    admin.poll(0.1)  # serves the log lines queued for a logger


def test_without_a_logger_librdkafka_writes_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    """The characterization: what a helper client without a ``logger`` would do."""
    _refused({**NOWHERE})
    assert "Connection refused" in capfd.readouterr().err


def test_a_helper_client_logs_through_logging(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="safeconsumer.librdkafka")
    _refused(admin_config(NOWHERE))
    wait_until(
        lambda: any(r.name == "safeconsumer.librdkafka" for r in caplog.records),
        timeout=5,
        what="a librdkafka line logged",
    )
    assert capfd.readouterr().err == ""
