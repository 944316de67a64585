"""Which commit errors are retried, and the retry policy's own checks."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from safeconsumer import CommitRetry
from safeconsumer.base._errors import is_retriable_commit_error


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._WAIT_COORD,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TRANSPORT,
    ],
)
def test_coordinator_errors_are_retried(code: int) -> None:
    assert is_retriable_commit_error(KafkaError(code))


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError._NO_OFFSET,
        KafkaError.OFFSET_METADATA_TOO_LARGE,
    ],
)
def test_fencing_and_other_errors_are_not(code: int) -> None:
    assert not is_retriable_commit_error(KafkaError(code))


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS])
def test_fencing_is_not_retried_even_when_flagged_retriable(code: int) -> None:
    assert not is_retriable_commit_error(KafkaError(code, retriable=True))


def test_a_fatal_error_is_never_retried() -> None:
    assert not is_retriable_commit_error(KafkaError(KafkaError._WAIT_COORD, fatal=True))


def test_the_policy_retries_then_raises_the_last_error() -> None:
    calls = []
    policy = CommitRetry(attempts=3, initial=0.001, maximum=0.002, deadline=5)
    with pytest.raises(KafkaException) as raised:
        for attempt in policy.retrying():
            with attempt:
                calls.append(1)
                raise KafkaException(KafkaError(KafkaError._WAIT_COORD))
    assert len(calls) == 3 and raised.value.args[0].code() == KafkaError._WAIT_COORD


def test_the_policy_does_not_retry_a_fenced_commit() -> None:
    calls = []
    with pytest.raises(KafkaException):
        for attempt in CommitRetry(attempts=5, initial=0.001).retrying():
            with attempt:
                calls.append(1)
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
    assert len(calls) == 1


@pytest.mark.parametrize(
    "bad", [{"attempts": 0}, {"attempts": 1.5}, {"initial": 0}, {"deadline": -1}, {"maximum": True}]
)
def test_bad_policies_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="CommitRetry"):
        CommitRetry(**bad)  # type: ignore[arg-type]
