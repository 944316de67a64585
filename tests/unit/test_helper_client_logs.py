"""The clients safeconsumer creates for itself log through ``logging``, never to stderr.

No broker: a bootstrap address nothing listens on makes librdkafka log a refused connection.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaException, Message
from confluent_kafka.admin import AdminClient

from safeconsumer import DeadLetter
from safeconsumer.base._clients import admin_config
from safeconsumer.health.dead_letters import CannotRead, DeadRecord, read_dead_letters, replay
from safeconsumer.health.doctor import CannotConnect, diagnose
from safeconsumer.poison._policy import DeadLetterWriter
from safeconsumer.testing import KafkaTestKit, wait_until

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


def _no_stderr_and_logged(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    wait_until(
        lambda: any(r.name == "safeconsumer.librdkafka" for r in caplog.records),
        timeout=5,
        what="a librdkafka line logged",
    )
    assert capfd.readouterr().err == ""


def test_the_dead_letter_writer_logs_through_logging_and_leaves_nothing_in_flight(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A write given up on (no acknowledgement in time) is purged: the producer does not go with
    a message "still in queue or transit" (librdkafka's TERMINATE line)."""
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    writer = DeadLetterWriter("g", admin_config(NOWHERE, "dead-letters"))
    record = Message(topic="orders", partition=0, offset=7, key=b"k", value=b"v", timestamp=(1, 1000))
    with pytest.raises(TimeoutError):
        writer.write(DeadLetter("orders.dlq", timeout=0.5), record, ValueError("bad"), "process", 1)
    writer.close()
    _no_stderr_and_logged(capfd, caplog)
    assert not any("still in queue or transit" in r.getMessage() for r in caplog.records)


def test_the_dead_letters_command_s_clients_log_through_logging(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    with pytest.raises(CannotRead):
        read_dead_letters(NOWHERE, "orders.dlq", timeout=0.5)
    view = DeadRecord(0, 3, "orders", 0, 7, "g", "process", "ValueError", "bad", 1.0)
    record = Message(topic="orders.dlq", partition=0, offset=3, key=b"k", value=b"v", timestamp=(1, 1000))
    with pytest.raises(RuntimeError, match="1 not acknowledged"):
        replay(NOWHERE, [(view, record)], timeout=0.5)
    _no_stderr_and_logged(capfd, caplog)
    assert not any("still in queue or transit" in r.getMessage() for r in caplog.records)


def test_the_doctor_logs_through_logging(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """A cluster the doctor cannot reach: it raises CannotConnect and librdkafka's lines about the
    refused connections are log records, not stderr."""
    caplog.set_level(logging.DEBUG, logger="safeconsumer.librdkafka")
    with pytest.raises(CannotConnect):
        diagnose(str(NOWHERE["bootstrap.servers"]), "g", connection=dict(NOWHERE), timeout=1.0)
    _no_stderr_and_logged(capfd, caplog)


def test_the_test_kit_logs_through_logging(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="safeconsumer.testing.librdkafka")
    kit = KafkaTestKit(str(NOWHERE["bootstrap.servers"]))
    with pytest.raises(KafkaException):
        kit.admin.list_topics(timeout=0.5)
    kit.admin.poll(0.1)
    wait_until(
        lambda: any(r.name == "safeconsumer.testing.librdkafka" for r in caplog.records),
        timeout=5,
        what="a librdkafka line logged",
    )
    assert capfd.readouterr().err == ""
