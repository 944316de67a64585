"""Upstream's own argument handling, mimicked where SafeConsumer must judge arguments first.

``confluent_kafka.Consumer``'s methods are C functions with their own argument parser and
checks. SafeConsumer's overrides take the same arguments; wherever a call is one upstream
would refuse (a wrong type, a missing or extra argument, a value out of range), upstream's
own method is called to raise its own error with its own ``args``, before anything happens.
Where SafeConsumer must judge a value itself (``enable.auto.offset.store``, which it changes
before librdkafka sees it), it raises exactly what librdkafka would.

Nothing here holds state. Two functions act besides answering: ``auto_store_setting`` builds and
closes a throwaway ``Consumer`` so that librdkafka names the first bad setting, and
``show_upstream_signatures`` sets the signatures ``poll()``/``consume()`` show (once, at import).
The facade's decorators are here too: ``guarded`` (on a stopped consumer upstream's own method
answers), ``passed_through`` (upstream's method as it is, under the client lock) and ``typed_as``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from inspect import Parameter, Signature
from typing import Any, TypeVar, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ..base._errors import FatalConsumerError, consumer_closed
from ..base._keys import Key
from ._lifecycle import State

#: Timeouts poll() takes as they are; anything else is first judged by upstream's poll().
TIMEOUT_TYPES = frozenset({int, float})

NO_CONF: Any = object()  # SafeConsumer() given no config dict
NO_CALLBACK: Any = object()  # subscribe() given no callback (an explicit None is upstream's TypeError)


class _WholeConsumer:
    """The default of ``pause()``/``resume()``: no argument means the whole consumer."""

    def __repr__(self) -> str:
        return "<the whole consumer>"


WHOLE_CONSUMER: Any = _WholeConsumer()

_F = TypeVar("_F", bound=Callable[..., Any])


def config_of(conf: object, more: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The config dict ``Consumer(conf, **kwargs)`` takes, with upstream's TypeErrors."""
    if more:
        raise TypeError("expected tuple containing single dict")
    if conf is NO_CONF:
        if not kwargs:
            raise TypeError("expected configuration dict")
        conf = {}
    elif not isinstance(conf, dict):
        raise TypeError("expected configuration dict")
    return {**conf, **kwargs}


def auto_store_setting(config: dict[str, Any]) -> bool:
    """``enable.auto.offset.store`` as librdkafka reads it, with librdkafka's error for a bad value.

    librdkafka judges the settings in the dict's order: whatever it finds wrong first (another
    key, another value) is the error upstream raises, so a bad value lets librdkafka speak first.
    """
    try:
        return librdkafka_bool("enable.auto.offset.store", config.get("enable.auto.offset.store", True))
    except KafkaException:
        Consumer(config).close()
        raise


def librdkafka_bool(name: str, value: object) -> bool:
    """A boolean setting as librdkafka reads it (true/t/1, false/f/0, any case), with its errors."""
    text = "" if value is None else str(value)
    if not text:
        raise KafkaException(
            KafkaError(KafkaError._INVALID_ARG, f'Bool configuration property "{name}" cannot be set to empty value')
        )
    lowered = text.lower()
    if lowered in ("true", "t", "1"):
        return True
    if lowered in ("false", "f", "0"):
        return False
    raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f'Expected bool value for "{name}": true or false'))


def protocol_label(conf: Mapping[str, Any]) -> str:
    """For logs and spans: "consumer" (KIP-848) or "classic/<assignment strategy>"."""
    if str(conf.get("group.protocol", "classic")).lower() == "consumer":
        return "consumer"
    return "classic/" + str(conf.get("partition.assignment.strategy", "range,roundrobin")).replace(" ", "")


def is_incremental(conf: Mapping[str, Any]) -> bool:
    if str(conf.get("group.protocol", "classic")).lower() == "consumer":
        return True
    return "cooperative" in str(conf.get("partition.assignment.strategy", "")).lower()


def positive(name: str, value: float | None, default: float) -> float:
    """A keyword option in seconds: ``default`` when None, else a positive number."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def upstream_arguments(
    method: _F, *, stopped: Callable[[Any], bool] | None = None, answer: Callable[..., Any] | None = None
) -> _F:
    """Arguments that do not bind to the method are judged by upstream's own method.

    confluent_kafka's methods are C functions with their own argument parser: a call with too
    many, too few or unknown arguments gets its ``TypeError`` and message, and the few calls it
    accepts (``assignment(1)``) its answer. A TypeError raised by the call itself (no frame of
    ``method`` in its traceback) is such a binding error; one raised inside ``method`` is not.

    With ``stopped``: on a consumer it says is stopped, ``answer(consumer, upstream_method, name,
    *args, **kwargs)`` answers instead, given exactly the caller's arguments (the facade's guard).
    """
    upstream = getattr(Consumer, method.__name__)
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: Consumer, *args: Any, **kwargs: Any) -> Any:
        if stopped is not None and answer is not None and stopped(self):
            return answer(self, upstream, name, *args, **kwargs)
        try:
            return method(self, *args, **kwargs)
        except TypeError as exc:
            if exc.__traceback__ is None or exc.__traceback__.tb_next is not None:
                raise
        return upstream(self, *args, **kwargs)

    return cast(_F, wrapper)


def stopped(
    consumer: Consumer,
    fatal: FatalConsumerError | None,
    note: str,
    method: Callable[..., Any],
    *args: Any,
    **kwargs: Any,
) -> Any:
    """A confluent_kafka method called on a stopped (closed, or never initialised) consumer.

    A fatal error that stopped it is raised again. Otherwise upstream's own method answers,
    so its argument checks, errors and messages are upstream's; its RuntimeError
    ("Consumer closed") becomes a ConsumerClosedError (a RuntimeError) with exactly its
    ``args``, and ``note`` (naming the consumer and the method).
    """
    if fatal is not None:
        raise fatal
    try:
        return method(consumer, *args, **kwargs)
    except RuntimeError as exc:
        raise consumer_closed(exc.args, note) from None


def given(**kwargs: Any) -> dict[str, Any]:
    """The keyword arguments the caller gave (not None), to hand on to upstream as they were."""
    return {k: v for k, v in kwargs.items() if v is not None}


def is_record(message: object) -> bool:
    """A record that can be committed or stored as it is: upstream judges anything else."""
    return (
        isinstance(message, Message)
        and message.error() is None
        and message.topic() is not None
        and message.partition() is not None
        and message.offset() is not None
    )


def is_partition_list(offsets: object) -> bool:
    return isinstance(offsets, list) and all(isinstance(tp, TopicPartition) for tp in offsets)


def partition_keys(consumer: Consumer, partitions: object, method: str) -> list[Key]:
    """Keys of a TopicPartition list; anything else is judged by upstream's ``method`` (it raises
    its own TypeError before doing anything)."""
    if not is_partition_list(partitions):
        getattr(Consumer, method)(consumer, partitions)
        raise TypeError(f"{method}() requires a list of TopicPartition")  # pragma: no cover - upstream raised
    return [(tp.topic, tp.partition) for tp in cast("list[TopicPartition]", partitions)]


def given_callbacks(on_assign: object, on_revoke: object, on_lost: object) -> dict[str, Any]:
    """The rebalance callbacks subscribe() was given (an explicit None included), by name."""
    named = (("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost))
    return {name: cb for name, cb in named if cb is not NO_CALLBACK}


def rebalance_callbacks(
    consumer: Consumer, topics: list[str], on_assign: object, on_revoke: object, on_lost: object
) -> dict[str, Any]:
    """subscribe()'s given callbacks; if one is not callable, upstream's subscribe() raises its TypeError."""
    callbacks = given_callbacks(on_assign, on_revoke, on_lost)
    if not all(callable(cb) for cb in callbacks.values()):
        Consumer.subscribe(consumer, topics, **callbacks)  # upstream's TypeError
        raise TypeError("rebalance callbacks must be callable")  # pragma: no cover - upstream raised
    return callbacks


def partition_key(tp_or_message: object) -> Key:
    """The key of what ``owns()`` takes: a TopicPartition, a Message or a (topic, partition) pair."""
    if isinstance(tp_or_message, TopicPartition):
        return (tp_or_message.topic, tp_or_message.partition)
    if isinstance(tp_or_message, Message):
        return (cast(str, tp_or_message.topic()), cast(int, tp_or_message.partition()))
    if isinstance(tp_or_message, tuple) and len(tp_or_message) == 2:
        return (str(tp_or_message[0]), int(tp_or_message[1]))
    raise TypeError(f"owns() takes a TopicPartition, a Message or (topic, partition), got {tp_or_message!r}")


def poll_timeout(consumer: Consumer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    """The timeout of a poll() called otherwise than ``poll(number)``; upstream refuses the rest."""
    if not args and kwargs.keys() == {"timeout"}:
        args, kwargs = (kwargs["timeout"],), {}
    timeout = args[0] if len(args) == 1 and not kwargs else None
    if timeout is None or not (hasattr(type(timeout), "__float__") or hasattr(type(timeout), "__index__")):
        Consumer.poll(consumer, *args, **kwargs)  # raises upstream's TypeError
        raise TypeError("poll() takes one number, timeout")  # pragma: no cover - upstream raised
    return float(timeout)


def consume_arguments(consumer: Consumer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, Any]:
    """``(num_messages, timeout)`` of a consume() call; upstream raises for any it refuses."""
    if len(args) == 2 and not kwargs:  # consume(n, timeout), the usual call: no dict built
        num_messages, timeout = args
        if num_messages.__class__ is int and 0 <= num_messages <= 1_000_000 and timeout.__class__ in TIMEOUT_TYPES:
            return num_messages, timeout
    named: dict[str, Any] = {}
    if len(args) <= 2 and kwargs.keys() <= {"num_messages", "timeout"}:
        named = dict(zip(("num_messages", "timeout"), args, strict=False))
        named = {**named, **kwargs} if not named.keys() & kwargs.keys() else {"conflict": True}
    num_messages, timeout = named.get("num_messages", 1), named.get("timeout", -1)
    if "conflict" in named or (not named and (args or kwargs)) or not _valid_consume(num_messages, timeout):
        Consumer.consume(consumer, *args, **kwargs)  # raises upstream's TypeError or ValueError
        raise TypeError("consume() takes num_messages and timeout")  # pragma: no cover - upstream raised
    return num_messages & 0xFFFFFFFF, timeout


def _valid_consume(num_messages: object, timeout: object) -> bool:
    """Arguments upstream's consume() accepts (an int from 0 to 1M, a number)."""
    # upstream reads num_messages as a C unsigned int (masked, as PyArg's "I" does), then checks it
    return (
        isinstance(num_messages, int)
        and num_messages & 0xFFFFFFFF <= 1_000_000
        and (hasattr(type(timeout), "__float__") or hasattr(type(timeout), "__index__"))
    )


def _poll_signature(self: Consumer, timeout: float = -1) -> Message | None:
    """The signature ``poll()`` shows: upstream's."""
    return None


def _consume_signature(self: Consumer, num_messages: int = 1, timeout: float = -1) -> list[Message]:
    """The signature ``consume()`` shows: upstream's."""
    return []


def show_upstream_signatures(cls: type[Consumer]) -> None:
    """``cls.poll``/``cls.consume`` take ``*args`` (see their docstrings) but show upstream's signatures."""
    cls.poll.__signature__ = inspect.signature(_poll_signature)  # type: ignore[attr-defined]
    cls.consume.__signature__ = inspect.signature(_consume_signature)  # type: ignore[attr-defined]


# -- the facade's overrides of upstream's methods ------------------------------------------------
def guarded(method: _F) -> _F:
    """The state guard of an override of upstream's method of the same name: on a stopped consumer
    upstream's own method answers, given exactly the caller's arguments (the facade's ``_stopped``);
    arguments that do not bind are judged by upstream's method."""
    return upstream_arguments(
        method,
        stopped=lambda self: self._life.state is State.CLOSED,
        answer=lambda self, *args, **kwargs: self._stopped(*args, **kwargs),
    )


def typed_as(upstream: _F) -> Callable[[Callable[..., Any]], _F]:
    """For type checkers: the decorated override has ``upstream``'s type (its overloads)."""
    return lambda method: cast(_F, method)


def passed_through(upstream: _F, *parameters: str, **defaults: Any) -> _F:
    """Upstream's ``upstream`` method as it is (its type, arguments and answer), guarded, called under
    the client lock with its errors translated. ``inspect`` shows ``parameters`` then ``defaults``."""

    def passed(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._client.call(upstream, *args, **kwargs)

    name = upstream.__name__
    passed.__name__, passed.__qualname__, passed.__doc__ = name, f"SafeConsumer.{name}", upstream.__doc__
    shown = [Parameter(p, Parameter.POSITIONAL_OR_KEYWORD) for p in ("self", *parameters)]
    shown += [Parameter(p, Parameter.POSITIONAL_OR_KEYWORD, default=d) for p, d in defaults.items()]
    passed.__signature__ = Signature(shown)  # type: ignore[attr-defined]
    return guarded(cast(_F, passed))
