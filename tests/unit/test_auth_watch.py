"""Refused logins: when a run of them is fatal (AuthWatch), and the error_cb in front of the app's."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from safeconsumer import AuthenticationFailedError, FatalConsumerError
from safeconsumer.base._errors import auth_failed, is_auth_failure
from safeconsumer.consumer._auth import AuthWatch, ErrorTap


def test_a_run_of_refusals_is_fatal_once_it_lasted_the_timeout() -> None:
    w = AuthWatch(timeout=10.0, quiet=20.0)
    assert not w.failed(100.0)
    assert w.failing_for == 0.0
    assert not w.failed(105.0)
    assert not w.failed(109.9)
    assert w.failed(110.0)
    assert w.failing_for == 10.0


def test_a_quiet_gap_ends_the_run_and_the_next_refusal_starts_a_new_one() -> None:
    w = AuthWatch(timeout=10.0, quiet=20.0)
    w.failed(0.0)
    w.failed(8.0)
    assert not w.failed(28.1)  # 20.1 s without a refusal: the login worked meanwhile
    assert w.failing_for == 0.0
    assert not w.failed(37.0)
    assert w.failed(38.1)


def test_the_quiet_gap_is_never_shorter_than_the_timeout() -> None:
    w = AuthWatch(timeout=10.0, quiet=1.0)
    assert w.quiet == 10.0
    w.failed(0.0)
    assert w.failed(10.0)  # one refusal every 10 s for 10 s is still one run


def test_which_errors_are_refused_logins() -> None:
    assert is_auth_failure(KafkaError(KafkaError._AUTHENTICATION))
    assert is_auth_failure(KafkaError(KafkaError._SSL))
    assert is_auth_failure(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED))
    assert not is_auth_failure(KafkaError(KafkaError._TRANSPORT))
    assert not is_auth_failure(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert not is_auth_failure(None)


def test_the_fatal_error_keeps_librdkafka_s_error_and_says_what_happened() -> None:
    err = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: invalid credentials")
    fatal = auth_failed(err, "orders", 10.0)
    assert isinstance(fatal, FatalConsumerError) and isinstance(fatal, AuthenticationFailedError)
    assert fatal.args == (err,) and fatal.kafka_error is err
    assert str(fatal).startswith(str(err))
    assert "refusing this consumer's login" in str(fatal) and "for 10s" in str(fatal) and "'orders'" in str(fatal)
    tls = auth_failed(KafkaError(KafkaError._SSL, "certificate verify failed"), "orders", 4.0)
    assert "TLS handshake" in str(tls)


def test_the_tap_tells_safeconsumer_first_then_the_application_the_same_error() -> None:
    order: list[tuple[str, KafkaError]] = []
    tap = ErrorTap(lambda e: order.append(("app", e)))
    err = KafkaError(KafkaError._AUTHENTICATION)
    tap(err)  # before the consumer's parts exist: the application alone
    tap.sink = lambda e: order.append(("ours", e))
    tap(err)
    assert order == [("app", err), ("ours", err), ("app", err)]


def test_a_fault_of_ours_never_takes_the_application_s_callback_away(caplog: pytest.LogCaptureFixture) -> None:
    heard: list[KafkaError] = []
    tap = ErrorTap(heard.append)

    def broken(_e: KafkaError) -> None:
        raise RuntimeError("bug")

    tap.sink = broken
    tap(KafkaError(KafkaError._SSL))
    assert len(heard) == 1 and "error listener failed" in caplog.text


def test_the_application_s_exception_propagates_as_under_confluent_kafka() -> None:
    def app(_e: KafkaError) -> None:
        raise ValueError("the app's own")

    with pytest.raises(ValueError, match="the app's own"):
        ErrorTap(app)(KafkaError(KafkaError._SSL))
