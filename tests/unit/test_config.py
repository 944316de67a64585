"""Config secrets never reach logs, reprs or telemetry."""

from __future__ import annotations

import logging

import pytest

from safeconsumer import SafeConsumer, redact_config

SECRET = "SECRET-do-not-log-91b4"


def test_secret_values_are_redacted() -> None:
    conf = {
        "bootstrap.servers": "127.0.0.1:9",
        "sasl.password": SECRET,
        "ssl.key.password": SECRET,
        "sasl.oauthbearer.client.secret": SECRET,
        "ssl.keystore.password": SECRET,
        "ssl.key.pem": SECRET,
        "sasl.username": "alice",
    }
    shown = redact_config(conf)
    assert SECRET not in repr(shown)
    assert shown["sasl.username"] == "alice" and shown["bootstrap.servers"] == "127.0.0.1:9"


def test_the_config_log_line_and_repr_hide_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    c = SafeConsumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "sasl.password": SECRET})
    try:
        assert SECRET not in repr(c)
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert "sasl.password" in logged, "the config line was not logged: the test proves nothing"
        assert SECRET not in logged
    finally:
        c.close()
