"""Running one case on one class, and comparing what upstream and SafeConsumer did.

A case's *result* is what an application could observe: the outcome of the call (its
normalized return value, or its exception type, ``args`` and message), the ``on_commit`` events the
consumer delivered during the call and the ``close()`` that follows it, and the outcome of
that ``close()``. Values are normalized to plain tuples by value: ``TopicPartition`` compares
by topic and partition only, so its offset, metadata, leader epoch and error are spelled out;
an exception's ``args`` are normalized the same way (a ``KafkaException``'s ``args[0]`` is a
``KafkaError``: its code, name, text and flags), memory addresses blanked.

An exception's PEP 678 notes are recorded, and shown in a failure, but never compared: SPEC
puts what SafeConsumer says beyond upstream (which consumer, which call) into notes, and
upstream adds none, so a note is never a difference.

Cases that may block forever or crash the interpreter on one of the two classes run in a
subprocess (``isolated``): their outcome may then also be ``blocked`` or ``crash``.
"""

from __future__ import annotations

import ast
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from safeconsumer import SafeConsumer

#: A local port nothing listens on: every connection attempt is refused at once.
BOOTSTRAP = "127.0.0.1:1"

#: The repository root, the working directory of isolated runs.
ROOT = Path(__file__).resolve().parents[2]

#: How long an isolated call may take before its outcome is ``blocked`` (upstream answers at once).
ISOLATED_TIMEOUT = 3.0

CLASSES: Mapping[str, type[Consumer]] = {"upstream": Consumer, "safe": SafeConsumer}


def base_config() -> dict[str, Any]:
    """The config every case starts from, the same for both classes."""
    return {
        "bootstrap.servers": BOOTSTRAP,
        "group.id": "conformance",
        # Without a broker an asynchronous commit waits for the group coordinator up to
        # session.timeout.ms (45 s by default), and close() waits for it: 20 ms keeps that short.
        # A synchronous commit still takes one second to fail with _WAIT_COORD.
        "session.timeout.ms": 20,
        "heartbeat.interval.ms": 5,
        # librdkafka's own log lines (connection refused, ...) on stderr are noise here.
        "log_level": 0,
    }


# -- outcomes -------------------------------------------------------------------------------

Kind = Literal["return", "raise", "blocked", "crash"]


@dataclass(frozen=True)
class Outcome:
    """How a call ended: ``("return", value)``, ``("raise", type, args, message)``, ``blocked`` or ``crash``."""

    kind: Kind
    value: object = None
    """return: the normalized value; blocked: the seconds waited; crash: the signal's name."""
    type: str = ""
    """raise: the exception's class, qualified (``builtins.TypeError``, ``cimpl.KafkaException``)."""
    message: str = ""
    """raise: ``str()`` of the exception, with memory addresses blanked."""
    mro: tuple[str, ...] = ()
    """raise: the qualified names of the exception's class and its bases (for the subclass rule)."""
    args: tuple[object, ...] = ()
    """raise: the exception's ``args``, normalized (:func:`normalize_args`); compared exactly."""
    notes: tuple[str, ...] = ()
    """raise: its PEP 678 notes, addresses blanked; recorded, never compared."""

    def __repr__(self) -> str:
        if self.kind == "raise":
            shown: tuple[object, ...] = ("raise", self.type.removeprefix("builtins."), self.message)
            if self.notes:
                shown += (f"notes={list(self.notes)!r}",)
            return repr(shown)
        return repr((self.kind, self.value))

    def to_literal(self) -> tuple[object, ...]:
        return (self.kind, self.value, self.type, self.message, self.mro, self.args, self.notes)

    @classmethod
    def from_literal(cls, data: Any) -> Outcome:
        kind, value, type_, message, mro, args, notes = data
        return cls(kind, value, type_, message, tuple(mro), tuple(args), tuple(notes))


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def _kafka_error(value: KafkaError) -> object:
    return (
        "KafkaError",
        value.code(),
        value.name(),
        value.str(),
        value.fatal(),
        value.retriable(),
        value.txn_requires_abort(),
    )


def _topic_partition(value: TopicPartition) -> object:
    error = None if value.error is None else _kafka_error(value.error)
    return ("TopicPartition", value.topic, value.partition, value.offset, value.metadata, value.leader_epoch, error)


def _message(value: Message) -> object:
    error = value.error()
    return (
        "Message",
        value.topic(),
        value.partition(),
        value.offset(),
        value.key(),
        value.value(),
        normalize(value.headers()),
        None if error is None else _kafka_error(error),
        value.timestamp(),
        value.leader_epoch(),
    )


_NORMALIZERS: tuple[tuple[type, Callable[[Any], object]], ...] = (
    (KafkaError, _kafka_error),
    (TopicPartition, _topic_partition),
    (Message, _message),
)


def normalize(value: object, receiver: object = None) -> object:
    """``value`` as plain, comparable data; ``receiver`` (the consumer called) is named as such."""
    if receiver is not None and value is receiver:
        return ("<the consumer called>",)
    if isinstance(value, Consumer):
        return ("<another consumer>",)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(normalize(v, receiver) for v in value))
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value if value is None else (type(value).__name__, value)
    for cls, normalizer in _NORMALIZERS:
        if isinstance(value, cls):
            return normalizer(value)
    raise TypeError(f"the harness cannot normalize a {type(value).__qualname__}: add it to normalize()")


def normalize_args(args: tuple[object, ...], receiver: object = None) -> tuple[object, ...]:
    """An exception's ``args`` as comparable data: each one normalized, addresses blanked.

    An argument :func:`normalize` does not know is compared by its ``repr()``.
    """

    def blank(value: object) -> object:
        if isinstance(value, str):
            return _ADDRESS.sub("0x…", value)
        if isinstance(value, tuple):
            return tuple(blank(v) for v in value)
        return value

    normalized: list[object] = []
    for arg in args:
        try:
            normalized.append(blank(normalize(arg, receiver)))
        except TypeError:
            normalized.append(("repr", _ADDRESS.sub("0x…", repr(arg))))
    return tuple(normalized)


def raised(exc: BaseException, receiver: object = None) -> Outcome:
    """The outcome of a call that raised ``exc``."""
    return Outcome(
        "raise",
        type=_qualified(type(exc)),
        message=_ADDRESS.sub("0x…", str(exc)),
        mro=tuple(_qualified(c) for c in type(exc).__mro__),
        args=normalize_args(exc.args, receiver),
        notes=tuple(_ADDRESS.sub("0x…", str(n)) for n in getattr(exc, "__notes__", ())),
    )


def outcome(call: Callable[[], object], receiver: object = None) -> Outcome:
    """Run ``call``: ``("return", normalized value)`` or ``("raise", type, args, message)``."""
    try:
        value = call()
    except Exception as exc:  # noqa: BLE001 - every exception is an outcome to compare
        return raised(exc, receiver)
    return Outcome("return", normalize(value, receiver))


# -- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """What the application could observe of one case on one class."""

    outcome: Outcome
    events: tuple[object, ...] = ()
    """``on_commit`` calls, normalized, in order: during the call and the final close()."""
    close: Outcome | None = None
    """The outcome of the close() after the call (None: not closed by the harness)."""

    def __repr__(self) -> str:
        text = repr(self.outcome)
        if self.events:
            text += f" events={list(self.events)!r}"
        if self.close is not None and self.close != Outcome("return"):
            text += f" then close() -> {self.close!r}"
        return text

    def to_literal(self) -> tuple[object, ...]:
        return (self.outcome.to_literal(), self.events, None if self.close is None else self.close.to_literal())

    @classmethod
    def from_literal(cls, data: Any) -> Result:
        out, events, close = data
        return cls(Outcome.from_literal(out), tuple(events), None if close is None else Outcome.from_literal(close))


def outcome_conforms(upstream: Outcome, safe: Outcome) -> bool:
    """SPEC's rule: the same return, or the same exception type with exactly upstream's ``args``
    (and so its message). A subclass of upstream's exception type conforms; notes are not compared.
    """
    if upstream.kind != safe.kind:
        return False
    if upstream.kind == "raise":
        return upstream.type in safe.mro and upstream.args == safe.args and upstream.message == safe.message
    return upstream.value == safe.value


def conforms(upstream: Result, safe: Result) -> bool:
    if not outcome_conforms(upstream.outcome, safe.outcome) or upstream.events != safe.events:
        return False
    if upstream.close is None or safe.close is None:
        return upstream.close is safe.close
    return outcome_conforms(upstream.close, safe.close)


_C_PARSER = re.compile(
    r"function takes|takes no (keyword )?arguments|takes exactly one argument|is an invalid keyword argument"
    r"|function missing required argument|expected \d+ arguments"
)
_PY_SIGNATURE = re.compile(r"positional arguments? but|got an unexpected keyword argument|missing \d+ required")


def explain(upstream: Result, safe: Result) -> str:
    """The kind of difference, for the failure message (and the report built from it)."""
    if not outcome_conforms(upstream.outcome, safe.outcome):
        return _explain_outcomes(upstream.outcome, safe.outcome)
    if upstream.events != safe.events:
        return "different on_commit events"
    return "a different outcome of the close() that follows"


def _explain_outcomes(a: Outcome, b: Outcome) -> str:
    if a.kind != b.kind:
        return f"{b.kind}s where upstream {a.kind}s"
    if a.kind != "raise":
        return "a different return value"
    if a.type not in b.mro:
        missing = b.type == "builtins.AttributeError"  # SafeConsumer's own state was never set up
        return "a different exception type" + (": AttributeError, SafeConsumer's state is missing" if missing else "")
    same = "the same exception type" if a.type == b.type else "a subclass of upstream's exception type"
    if b.message.replace("SafeConsumer", "Consumer") == a.message:
        return f"{same}; the message differs only in the class name"
    if _C_PARSER.search(a.message) and _PY_SIGNATURE.search(b.message):
        return f"{same}; argument-parsing message: Python signature vs upstream's C parser"
    return f"{same}, {_explain_message(a, b)}"


def _explain_message(a: Outcome, b: Outcome) -> str:
    if a.message == b.message:
        return f"the same message, different args: upstream {a.args!r}, SafeConsumer {b.args!r}"
    if b.message.startswith(a.message):
        return "with more than upstream's message (put the rest in a note: add_note())"
    return "with a message that is not upstream's"


# -- cases ----------------------------------------------------------------------------------

State = Literal["open", "closed", "uninit"]


@dataclass(frozen=True)
class Case:
    """One call of one method, run on a fresh consumer of each class."""

    id: str
    method: str
    call: Callable[[Consumer], object]
    """The call, building its arguments afresh each time (TopicPartition and Message are mutable)."""
    setup: Callable[[Consumer], object] | None = None
    """Calls made first, that work the same on both classes (assign, subscribe)."""
    conf: Mapping[str, object] = field(default_factory=dict)
    """Overrides of :func:`base_config`."""
    state: State = "open"
    """open; closed (after setup, close() is called first); uninit (a subclass skipping __init__)."""
    isolated: bool = False
    """Run in a subprocess: on one of the classes the call blocks forever or crashes."""


@dataclass(frozen=True)
class CtorCase:
    """One construction, ``build(cls)``; a consumer it returns is closed afterwards."""

    id: str
    build: Callable[[type[Consumer]], object]
    isolated: bool = False


def _skip_init(self: Consumer, *args: object, **kwargs: object) -> None:
    """An ``__init__`` that does not call ``super().__init__()``."""


def uninitialised(cls: type[Consumer]) -> Consumer:
    """An instance of a subclass of ``cls`` whose ``__init__`` never calls ``super().__init__()``."""
    sub: type[Consumer] = type("Uninitialised", (cls,), {"__init__": _skip_init, "__qualname__": "Uninitialised"})
    return sub()


def run_case(case: Case, cls: type[Consumer]) -> Result:
    if case.isolated:
        return run_isolated(case.id, cls)
    if case.state == "uninit":
        consumer = uninitialised(cls)
        return Result(outcome(lambda: case.call(consumer), consumer))
    events: list[object] = []

    def on_commit(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        events.append(("on_commit", normalize(err), normalize(partitions)))

    consumer = cls({**base_config(), "on_commit": on_commit, **case.conf})
    close: Outcome | None = None
    try:
        if case.setup is not None:
            case.setup(consumer)
        if case.state == "closed":
            consumer.close()
        result = outcome(lambda: case.call(consumer), consumer)
    finally:
        if case.state == "open":
            close = outcome(consumer.close)
        else:
            consumer.close()
    return Result(result, tuple(events), close)


def run_ctor_case(case: CtorCase, cls: type[Consumer]) -> Result:
    if case.isolated:
        return run_isolated(case.id, cls)
    made: list[Consumer] = []

    def build() -> object:
        built = case.build(cls)
        if isinstance(built, Consumer):
            made.append(built)
        return built

    result = outcome(build)
    close = outcome(made[0].close) if made else None
    return Result(result, close=close)


def run_isolated(case_id: str, cls: type[Consumer]) -> Result:
    """Run a case in a subprocess (``tests.conformance._isolated``): it may block or crash there."""
    which = next(name for name, c in CLASSES.items() if c is cls)
    command = [sys.executable, "-m", "tests.conformance._isolated", case_id, which]
    try:
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=ISOLATED_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return Result(Outcome("blocked", ISOLATED_TIMEOUT))
    if proc.returncode < 0:
        return Result(Outcome("crash", signal.Signals(-proc.returncode).name))
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"isolated run of {case_id!r} on {which} failed ({proc.returncode}):\n{proc.stderr}")
    return Result.from_literal(ast.literal_eval(lines[-1]))


def compare(case_id: str, upstream: Result, safe: Result) -> None:
    """Fail unless SafeConsumer's result conforms to upstream's."""
    __tracebackhide__ = True
    if not conforms(upstream, safe):
        raise AssertionError(
            f"{case_id}\n  upstream:      {upstream!r}\n  SafeConsumer:  {safe!r}\n"
            f"  difference:    {explain(upstream, safe)}"
        )
