"""The allow-list: SPEC's deliberate differences from ``confluent_kafka.Consumer``, and nothing else.

SPEC ("Drop-in means upstream's own behaviour") lists them completely:

- additions: ``pause()``/``resume()`` with no argument, ``pause_topics``, ``resume_topics``,
  ``paused``, ``pause_state``, ``keepalive``, ``owns``, ``process``, and the typed keyword-only options;
- the automatic keepalive keeps a quiet member in its group (``keepalive="off"``: upstream's eviction);
- I7 drops commits for partitions a group member does not own; I8 stores offsets once processed.

Each entry says which SPEC words it rests on, why, and the documented way back to upstream's
behaviour. ``cases`` are the table rows (``cases.py`` ids) where SafeConsumer may differ: for each,
upstream's outcome *today* (so a release that changes it fails the suite) and the outcome
SafeConsumer must have instead (by SPEC's rule: the same type or a subclass, with exactly its
``args`` and message), with no ``on_commit`` event. ``way_back`` are table rows that must conform
to upstream, showing the way back works; ``test_allowed`` runs them, and checks what a table cannot (the public names,
the keepalive's threads) in dedicated tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException

from .cases import case_id
from .harness import Outcome, raised


def returns(value: object = None) -> Outcome:
    return Outcome("return", value)


def raises(exc: type[BaseException], *args: object) -> Outcome:
    """The outcome of raising ``exc(*args)``: its type, exactly those ``args``, its message."""
    return raised(exc(*args))


@dataclass(frozen=True)
class Allowed:
    """One deliberate difference of SPEC."""

    key: str
    spec: str
    """SPEC's words the difference rests on."""
    reason: str
    way_back: str
    """The documented way to get upstream's behaviour back."""
    cases: Mapping[str, tuple[Outcome, Outcome]] = field(default_factory=dict)
    """Table id -> (upstream's outcome today, SafeConsumer's allowed outcome)."""
    way_back_cases: tuple[str, ...] = ()
    """Table ids that must conform to upstream: the way back, exercised."""


MISSING_PARTITIONS = raises(TypeError, "function missing required argument 'partitions' (pos 1)")

#: What every method raises after close() (and on a subclass that skipped ``__init__``).
CONSUMER_CLOSED = raises(RuntimeError, "Consumer closed")


def _no_such_property(name: str) -> Outcome:
    return raises(KafkaException, KafkaError(KafkaError._INVALID_ARG, f'No such configuration property: "{name}"'))


_WAIT_COORD = raises(
    KafkaException, KafkaError(KafkaError._WAIT_COORD, "Commit failed: Local: Waiting for coordinator")
)
_UNKNOWN_PARTITION = raises(
    KafkaException, KafkaError(KafkaError._UNKNOWN_PARTITION, "StoreOffsets failed: Local: Unknown partition")
)

#: SafeConsumer's typed keyword-only options (``SafeConsumer.__init__``), a SPEC addition, with a value each.
OPTION_EXAMPLES = (
    ("keepalive", '"off"'),
    ("keepalive_after", "1.0"),
    ("keepalive_max", "60.0"),
    ("on_fatal", '"raise"'),
    ("commit_retry", "None"),
    ("meter_provider", "None"),
    ("tracer_provider", "None"),
    ("explain_rebalances", "False"),
    ("fetch_memory_budget", "None"),
    ("auth_failure_timeout", "None"),
    ("poison", "None"),
    ("migration_timeout", "None"),
)
OPTIONS = tuple(name for name, _ in OPTION_EXAMPLES)
_A_CONSUMER = returns(("<another consumer>",))

#: SafeConsumer's public methods and attributes that upstream does not have, a SPEC addition.
ADDITIONS = (
    "handle",  # SPEC's poison records: the processing failures' policy (issue 25; docs/poison-records.md)
    "keepalive",
    "owns",
    "pause_state",
    "pause_topics",
    "paused",
    "process",
    "resume_topics",
)

#: Public names outside SPEC's list, kept one release for the applications that use them: each
#: warns (DeprecationWarning) and names its replacement outside the consumer's own namespace.
#: Name -> the replacement (test_allowed checks both). Removed in 1.0; this list then empties.
DEPRECATED = {
    "delivery_stats": "safeconsumer.delivery_stats(consumer)",
    "parked": "consumer.pause_state().parked",
}

#: store_offsets() rows of a group member owning nothing: upstream answers "not assigned".
_MEMBER_STORES = (
    "c.store_offsets(record())",
    "c.store_offsets(message=record())",
    'c.store_offsets(record(topic="u"))',
    'c.store_offsets(offsets=[TP("t", 0, 1)])',
    'c.store_offsets(None, [TP("t", 0, 1)])',
    'c.store_offsets(offsets=[TP("t", 0, 1), TP("t", 1, 7)])',
    'c.store_offsets(offsets=[TP("u", 0, 1)])',
    'c.store_offsets(offsets=[TP("t", 0, 1), TP("u", 0, 1)])',
    'c.store_offsets(offsets=[TP("t", 0)])',
    'c.store_offsets(offsets=[TP("t", 0, 1, metadata="m")])',
    'c.store_offsets(offsets=[TP("t", 0, 1, leader_epoch=2)])',
    'c.store_offsets(offsets=[TP("t", -1, 1)])',
    'c.store_offsets(offsets=[TP("", 0, 1)])',
    'c.store_offsets(Message(topic="t", partition=0))',
)

ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        key="addition: pause()/resume() without an argument",
        spec="additions: `pause()`/`resume()` with no argument",
        reason="the consumer-level pause mark: nothing is delivered until resume(); upstream requires partitions",
        way_back="pass the partitions: pause(partitions) and resume(partitions) are upstream's, unchanged",
        cases={
            "c.pause()": (MISSING_PARTITIONS, returns()),
            "c.resume()": (MISSING_PARTITIONS, returns()),
            "assigned | c.pause()": (MISSING_PARTITIONS, returns()),
            "paused | c.resume()": (MISSING_PARTITIONS, returns()),
            # Like every call after close() (upstream checks the arguments first and raises TypeError).
            "closed | c.pause()": (MISSING_PARTITIONS, CONSUMER_CLOSED),
            "closed | c.resume()": (MISSING_PARTITIONS, CONSUMER_CLOSED),
            "uninit | c.pause()": (MISSING_PARTITIONS, CONSUMER_CLOSED),
            "uninit | c.resume()": (MISSING_PARTITIONS, CONSUMER_CLOSED),
        },
        way_back_cases=(
            'assigned | c.pause([TP("t", 0)])',
            'assigned | c.pause([TP("t", 0), TP("t", 1)])',
            "assigned | c.pause([])",
            'assigned | c.pause([TP("u", 0)])',
            'paused | c.resume([TP("t", 0)])',
            'paused | c.resume([TP("t", 0), TP("t", 1)])',
            "paused | c.resume([])",
            'assigned | c.pause([TP("t", 0)]) or c.resume([TP("t", 0)])',
        ),
    ),
    Allowed(
        key="addition: pause_topics, resume_topics, paused, pause_state, keepalive, owns, process",
        spec="additions: `pause_topics`, `resume_topics`, `paused`, `pause_state`, `keepalive`, `owns`, `process`",
        reason="new methods; upstream has no attribute of these names",
        way_back="do not call them; every upstream method keeps its name (test_public_names)",
    ),
    Allowed(
        key="addition: typed keyword-only options",
        spec="additions: ... and the typed keyword-only options",
        reason=(
            "safeconsumer's options are keyword arguments, never config keys, so a typo raises; "
            "upstream takes every keyword argument as a config property"
        ),
        way_back=(
            "leave them out (their defaults apply); every other keyword argument is a config property, "
            "as upstream, and a config key of the same name is a config key (librdkafka refuses it)"
        ),
        cases={
            **{f"K(CONF, {name}={value})": (_no_such_property(name), _A_CONSUMER) for name, value in OPTION_EXAMPLES},
            'K(CONF, keepalive="auto")': (_no_such_property("keepalive"), _A_CONSUMER),
        },
        way_back_cases=(
            "K(CONF)",
            "K(CONF, foo=1)",
            "K(CONF, keepalive_afterr=1.0)",
            'K({**CONF, "keepalive": "off"})',
            'K({**CONF, "on_fatal": "exit"})',
            'K(CONF, **{"group.id": "other"})',
        ),
    ),
    Allowed(
        key="keepalive: the automatic keepalive keeps a quiet member in its group",
        spec='the automatic keepalive keeps a quiet member in its group (`keepalive="off"`: upstream\'s eviction)',
        reason=(
            "KIP-62: long processing would exceed max.poll.interval.ms and get the member evicted; a "
            "background thread polls while the application is quiet (callbacks then run on that thread)"
        ),
        way_back=(
            'keepalive="off": no thread ever polls the client; callbacks run only inside the application\'s '
            "own calls, as upstream (test_keepalive_off_is_upstreams_threading)"
        ),
    ),
    Allowed(
        key="I7: a group member's commits of partitions it does not own are dropped",
        spec=(
            "I7 drops commits for partitions a group member does not own; I7: a consumer that is a group "
            "member (it called subscribe()) never writes an offset, through commit()/store_offsets(), "
            "for a partition it does not own at that moment; such offsets are dropped with a warning and counted"
        ),
        reason="writing them would move another member's position, or commit past records the next owner has not read",
        way_back=(
            "a consumer that never subscribed (assign()-based, or an offsets tool) commits what it is told, "
            "exactly as confluent_kafka does"
        ),
        cases={
            'subscribed | c.commit(offsets=[TP("t", 0, 1)])': (returns(), returns()),
            "subscribed | c.commit(record())": (returns(), returns()),
            'subscribed | c.commit(offsets=[TP("t", 0, 1)], asynchronous=False)': (_WAIT_COORD, returns(("list", ()))),
            **{
                case_id(code, conf="no-auto-store", setup="subscribed"): (_UNKNOWN_PARTITION, returns())
                for code in _MEMBER_STORES
            },
        },
        way_back_cases=(
            'c.commit(offsets=[TP("t", 0, 1)])',
            "c.commit(record())",
            'assigned | c.commit(offsets=[TP("u", 0, 1)])',
            'c.commit(offsets=[TP("t", 0, 1)], asynchronous=False)',
            'no-auto-store | c.store_offsets(offsets=[TP("t", 0, 1)])',
            "no-auto-store | c.store_offsets(record())",
            'no-auto-store assigned | c.store_offsets(offsets=[TP("u", 0, 1)])',
        ),
    ),
    Allowed(
        key="I8: offsets are stored once processed",
        spec="I8 stores offsets once processed",
        reason=(
            "raw librdkafka stores a record's offset when it hands the record out; a process dying "
            "mid-batch then commits past records it never finished"
        ),
        way_back=(
            "enable.auto.offset.store=false and store_offsets() yourself: the offsets the application "
            "stores are its own, as in confluent_kafka"
        ),
        way_back_cases=(
            'no-auto-store assigned | c.store_offsets(offsets=[TP("t", 0, 1)])',
            "no-auto-store assigned | c.store_offsets(record())",
            'no-auto-store assigned | c.store_offsets(offsets=[TP("t", 0, 1), TP("t", 1, 7)])',
            'no-auto-store assigned | c.store_offsets(offsets=[TP("t", 0, 1)]) or c.commit()',
            'no-auto-store assigned | c.store_offsets(offsets=[TP("t", 0, 1)]) or c.commit(offsets=[TP("t", 1, 7)])',
            'no-auto-store | c.store_offsets(offsets=[TP("t", 0, 1)])',
        ),
    ),
)

#: Table id -> the entry that allows SafeConsumer to differ there.
ALLOWED_CASES: Mapping[str, Allowed] = {case: entry for entry in ALLOWED for case in entry.cases}
