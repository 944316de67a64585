"""The exception tree, and the one place a foreign error is translated.

::

    SafeConsumerError                  base of everything safeconsumer raises itself
    ├── ConsumerClosedError            (also RuntimeError) a call after close(): args ("Consumer closed",)
    ├── InvalidPauseRequest            (also ValueError, TypeError) bad pause/resume input
    ├── PauseStateError                (also RuntimeError) topic pause with nothing to apply it to
    └── FatalConsumerError             (also KafkaException) the consumer cannot go on; it has closed itself
        ├── GroupMaxSizeReachedError   the broker refused this member: group.max.size reached
        ├── GroupMigrationError        the broker refused to convert a classic group for this member
        └── AuthenticationFailedError  the cluster kept refusing its credentials or TLS handshake

Errors of the underlying client keep their confluent_kafka types (``KafkaException``,
``RuntimeError``, ``TypeError``, ``ValueError``) so existing ``except`` clauses keep working.
A fatal error is a ``KafkaException`` too, as upstream's are: ``args[0]`` is the original
:class:`confluent_kafka.KafkaError` (also ``kafka_error``), and its text starts with upstream's
(``KafkaError{...}``), then says what safeconsumer did about it.

Where safeconsumer raises an error in upstream's place (a call after ``close()``, a setting it
judges before librdkafka does), ``args`` are exactly upstream's (upstream's own tests compare
``args[0]`` whole); what safeconsumer adds (which consumer, which call) is a PEP 678 note
(:func:`with_note`), shown in tracebacks and never part of ``args`` or ``str()``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Literal, NoReturn, TypeVar

from confluent_kafka import KafkaError, KafkaException

#: librdkafka's code for the broker's GROUP_MAX_SIZE_REACHED (KIP-389).
GROUP_MAX_SIZE_REACHED = 81


class SafeConsumerError(Exception):
    """Base class of every error safeconsumer raises itself."""


class ConsumerClosedError(SafeConsumerError, RuntimeError):
    """A method was called after ``close()``; it is a RuntimeError, as confluent_kafka raises.

    Its ``args`` are upstream's (``("Consumer closed",)``); a note names the consumer and the call.
    """


class InvalidPauseRequest(SafeConsumerError, ValueError, TypeError):
    """A pause or resume request names something invalid (wrong type, empty name, bad regex)."""


class PauseStateError(SafeConsumerError, RuntimeError):
    """A topic-level pause cannot apply: the consumer has neither a subscription nor an assignment."""


class FatalConsumerError(SafeConsumerError, KafkaException):
    """The consumer cannot continue; it has stopped and closed, and every later call raises this again.

    A ``KafkaException``, as upstream's fatal errors are: an ``except KafkaException`` written for
    confluent_kafka catches it, and ``exc.args[0]`` is the ``KafkaError`` (when one caused it).
    """

    def __init__(self, message: str, *, kafka_error: KafkaError | None = None, group_id: str | None = None):
        super().__init__(kafka_error if kafka_error is not None else message)
        self.message = message
        self.kafka_error = kafka_error
        self.group_id = group_id

    def __str__(self) -> str:
        # Upstream's text (the KafkaError) first, then what happened to the consumer.
        return self.message if self.kafka_error is None else f"{self.kafka_error}: {self.message}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt with its keywords (Spark ships exceptions between processes).
        return (_rebuild, (type(self), self.message, self.kafka_error, self.group_id))


def _rebuild(
    cls: type[FatalConsumerError], message: str, kafka_error: KafkaError | None, group_id: str | None
) -> FatalConsumerError:
    return cls(message, kafka_error=kafka_error, group_id=group_id)


class GroupMaxSizeReachedError(FatalConsumerError):
    """The group is at the broker's ``group.max.size`` (classic) or ``group.consumer.max.size`` (KIP-848)."""


class GroupMigrationError(FatalConsumerError):
    """A ``group.protocol=consumer`` member was refused at its first heartbeat because the broker
    could not convert its classic group (KIP-848's online upgrade): ``GROUP_ID_NOT_FOUND``, which
    librdkafka makes fatal. The message says why it may be and what to do."""


class AuthenticationFailedError(FatalConsumerError):
    """The cluster kept refusing this consumer's login (SASL credentials) or its TLS handshake
    (an untrusted or invalid certificate) for ``auth_failure_timeout`` seconds."""


#: librdkafka's codes for a refused SASL login and a failed TLS handshake, and the broker's.
AUTH_FAILURE_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED})


def error_of(exc: KafkaException) -> KafkaError | None:
    """The ``KafkaError`` a ``KafkaException`` carries, if any."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


def is_auth_failure(error: KafkaError | None) -> bool:
    """True when ``error`` says the cluster refused the client's credentials or TLS handshake."""
    return error is not None and error.code() in AUTH_FAILURE_CODES


def auth_failed(error: KafkaError, group_id: str, seconds: float) -> AuthenticationFailedError:
    """The fatal error for logins refused for ``seconds``; its text is librdkafka's (which names
    the broker and the cause, never a secret), then what safeconsumer did."""
    what = (
        "the TLS handshake with the cluster kept failing"
        if error.code() == KafkaError._SSL
        else "the cluster kept refusing this consumer's login (SASL credentials)"
    )
    return AuthenticationFailedError(
        f"{what} for {seconds:.0f}s in group {group_id!r}; "
        "check the security settings (the error names the cause); the consumer stopped and closed "
        "(auth_failure_timeout=None keeps retrying, as confluent_kafka does)",
        kafka_error=error,
        group_id=group_id,
    )


_E = TypeVar("_E", bound=BaseException)


def with_note(exc: _E, note: str) -> _E:
    """``exc`` with ``note`` added (PEP 678: shown in tracebacks, never in ``args`` or ``str()``).

    On Python 3.10, which lacks ``add_note()``, the note is set as PEP 678 specifies.
    """
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(note)
    else:  # pragma: no cover - Python 3.10
        exc.__notes__ = [*getattr(exc, "__notes__", ()), note]
    return exc


def consumer_closed(args: tuple[object, ...], note: str) -> ConsumerClosedError:
    """The error of a call on a closed consumer: upstream's ``args`` (``("Consumer closed",)``), and ``note``."""
    return with_note(ConsumerClosedError(*args), note)


#: Process exit status with ``on_fatal="exit"`` when the group is full (sysexits EX_CONFIG:
#: the group size or the broker limit needs changing, a restart alone will not help).
EXIT_GROUP_MAX_SIZE = 78

#: Process exit status with ``on_fatal="exit"`` for any other fatal client error (EX_SOFTWARE).
EXIT_FATAL = 70


def is_group_max_size(error: KafkaError | None) -> bool:
    """True when ``error`` is the broker's GROUP_MAX_SIZE_REACHED, under either group protocol.

    Classic protocol: a (non-fatal) error event with code 81. KIP-848: librdkafka raises a
    fatal error and delivers it as a ``_FATAL`` event whose text names the cause.
    """
    if error is None:
        return False
    if error.code() == GROUP_MAX_SIZE_REACHED:
        return True
    text = error.str()
    return error.code() == KafkaError._FATAL and ("maximum size" in text or "GROUP_MAX_SIZE" in text)


#: What to do when the broker cannot convert a classic group for a consumer-protocol member.
MIGRATION_REMEDY = (
    "What to do: stop the group's classic members (the group empties; its committed offsets are kept) and "
    "start them with group.protocol=consumer: consumer-protocol SafeConsumers started first wait for that "
    "(migration_timeout) and join as soon as the group can be converted. Or run "
    "'safeconsumer doctor --migrate' for this group (docs/migrating-to-kip-848.md)."
)


def is_refused_conversion(error: KafkaError | None) -> bool:
    """librdkafka's fatal error for a consumer-protocol heartbeat answered GROUP_ID_NOT_FOUND: the
    broker would not convert the classic group this member joins (or it is no consumer group)."""
    if error is None:
        return False
    text = error.str()
    return (
        error.code() in (KafkaError._FATAL, KafkaError.GROUP_ID_NOT_FOUND)
        and "ConsumerGroupHeartbeat" in text
        and ("group id does not exist" in text or "GROUP_ID_NOT_FOUND" in text)
    )


def is_failed_conversion(error: KafkaError | None) -> bool:
    """librdkafka's fatal error for a consumer-protocol heartbeat answered UNKNOWN_SERVER_ERROR. At
    a member's first heartbeat that is the broker failing to convert a classic group whose first
    rebalance has not completed (Kafka 4.3.1: ``ConsumerGroup.fromClassicGroup`` reads a protocol
    the group does not have yet); pinned in ``tests/integration/test_protocol_migration.py``."""
    if error is None:
        return False
    text = error.str()
    return (
        error.code() in (KafkaError._FATAL, KafkaError.UNKNOWN)
        and "ConsumerGroupHeartbeat" in text
        and "Unknown broker error" in text
    )


def _migration_error(
    error: KafkaError, group_id: str, migration_reason: str | None, *, first_join: bool
) -> GroupMigrationError | None:
    """The fatal error of a consumer-protocol member's join the broker did not convert, or None."""
    if is_refused_conversion(error):
        likely = (
            f"Here: {migration_reason}."
            if migration_reason
            else "Kafka refuses when online upgrade is disabled (group.consumer.migration.policy), when the group "
            "is not a consumer group, when it has more members than group.consumer.max.size, and when a "
            "member's assignment carries assignor data (librdkafka's cooperative-sticky, KAFKA-18134)."
        )
        return GroupMigrationError(
            f"group {group_id!r} refused this group.protocol=consumer member: the broker did not convert the "
            f"classic group to a consumer group (GROUP_ID_NOT_FOUND at its first heartbeat, fatal in "
            f"librdkafka); the consumer closed. {likely} {MIGRATION_REMEDY}",
            kafka_error=error,
            group_id=group_id,
        )
    if first_join and is_failed_conversion(error):
        return GroupMigrationError(
            f"group {group_id!r} could not take this group.protocol=consumer member: the broker failed to "
            "convert the classic group to a consumer group (UNKNOWN_SERVER_ERROR at its first heartbeat, fatal "
            "in librdkafka); the consumer closed. Kafka 4.3 fails so while a classic group's first rebalance "
            "is under way (a classic member has just joined the empty group; it lasts "
            f"group.initial.rebalance.delay.ms). {MIGRATION_REMEDY}",
            kafka_error=error,
            group_id=group_id,
        )
    return None


def classify(
    error: KafkaError,
    group_id: str,
    instance_id: str | None = None,
    migration_reason: str | None = None,
    *,
    first_join: bool = False,
) -> FatalConsumerError | None:
    """The one translation of a librdkafka error event: the fatal error it means, or None.

    ``instance_id``: this member's ``group.instance.id``, if it is static. ``migration_reason``:
    why this member's join waited for its classic group to become convertible, if it did.
    ``first_join``: the member is joining and no partition came yet (a consumer-protocol member's
    first heartbeat is the one that converts a classic group).
    """
    if is_group_max_size(error):
        static = (
            f" This member is static (group.instance.id {instance_id!r}): a static member restarted before its "
            "previous incarnation's session timed out is refused by a full group too (KAFKA-20601, seen on "
            "Kafka 4.3.1 under both protocols); keep one member of headroom under the limit, or restart it "
            "after session.timeout.ms."
            if instance_id
            else ""
        )
        return GroupMaxSizeReachedError(
            f"group {group_id!r} is full: the broker refused this member because the group reached "
            "group.max.size (classic protocol) or group.consumer.max.size (consumer protocol); "
            "the consumer stopped joining and closed." + static,
            kafka_error=error,
            group_id=group_id,
        )
    migration = _migration_error(error, group_id, migration_reason, first_join=first_join)
    if migration is not None:
        return migration
    if error.code() == KafkaError.FENCED_INSTANCE_ID:
        # librdkafka raises a fatal error for it too, but reports the commit (or heartbeat)
        # that met it with this code first.
        return FatalConsumerError(
            f"this member of group {group_id!r} was fenced: another member uses its group.instance.id "
            f"({error.str()}); the consumer closed",
            kafka_error=error,
            group_id=group_id,
        )
    if error.code() == KafkaError.UNRELEASED_INSTANCE_ID or "instance ID is still used" in error.str():
        # KIP-848: the broker refuses a member whose group.instance.id a live member holds.
        return FatalConsumerError(
            f"group {group_id!r} refused this member: another live member uses its group.instance.id "
            f"({error.str()}); every consumer needs its own instance id; the consumer closed",
            kafka_error=error,
            group_id=group_id,
        )
    if error.fatal() or error.code() == KafkaError._FATAL:
        return FatalConsumerError(
            f"fatal client error in group {group_id!r}: {error.str()}; the consumer closed",
            kafka_error=error,
            group_id=group_id,
        )
    return None


#: Commit errors that mean "the coordinator is moving or briefly unreachable": a later attempt
#: can succeed. Fencing and rebalance errors are not here: the member's generation changed, and
#: what it may commit is decided again by the ownership check, not by retrying.
_RETRIABLE_COMMIT = frozenset(
    {
        KafkaError._WAIT_COORD,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)


#: The member's generation changed: never retried, whatever librdkafka's retriable flag says.
_FENCED_COMMIT = frozenset(
    {
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError.STALE_MEMBER_EPOCH,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.FENCED_INSTANCE_ID,
    }
)


def is_retriable_commit_error(error: KafkaError | None) -> bool:
    """True when a failed synchronous commit may be tried again (coordinator moving or unreachable)."""
    if error is None or error.fatal() or error.code() in _FENCED_COMMIT:
        return False
    return error.code() in _RETRIABLE_COMMIT or error.retriable()


def error_type(error: KafkaError | None, fallback: Exception) -> str:
    """The ``error.type`` of telemetry: librdkafka's name of the error code, else the exception class."""
    return error.name() if error is not None else type(fallback).__name__


#: What a consumer does on a fatal error: raise it from the next call, or end the process.
FatalPolicy = Literal["raise", "exit"]


def exit_process(status: int) -> NoReturn:
    """End the process now, from any thread: a fatal error must not be retried into the broker."""
    for handler in logging.getLogger().handlers + logging.getLogger("safeconsumer").handlers:
        handler.flush()
    sys.stderr.flush()
    if threading.current_thread() is threading.main_thread():
        raise SystemExit(status)
    os._exit(status)  # a background thread: SystemExit would end only this thread
