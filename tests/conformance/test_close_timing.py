"""close() right after a call: what librdkafka serves inside it is what upstream's close serves.

Upstream's close() runs the callbacks of events queued by the time librdkafka closes, and
re-raises what one of them raised. A stats event fires every ``statistics.interval.ms``; when
the application's last call ends near a tick, whether that tick lands inside close() depends on
how long close() takes to reach librdkafka. SafeConsumer once stopped and joined its threads
first, which made close() re-raise the application's ``stats_cb`` exception in about half of
such runs where upstream almost never does. Both classes run the same scenario alternately.
"""

from __future__ import annotations

import contextlib
from typing import Any

from confluent_kafka import Consumer

from .harness import BOOTSTRAP, CLASSES

RUNS = 12


def _close_raises(cls: type[Consumer]) -> bool:
    def stats_cb(_stats: str) -> None:
        raise RuntimeError("from stats_cb")

    conf: dict[str, Any] = {
        "bootstrap.servers": BOOTSTRAP,
        "group.id": "close-timing",
        "session.timeout.ms": 1000,
        "statistics.interval.ms": 100,
        "stats_cb": stats_cb,
        "log_level": 0,
    }
    consumer = cls(conf)
    consumer.subscribe(["t"])
    # consume() ends about when the second stats tick is due; it raises the first tick's
    # exception on both classes.
    with contextlib.suppress(RuntimeError):
        consumer.consume(timeout=0.2)
    try:
        consumer.close()
    except RuntimeError:
        return True
    return False


def test_close_reaches_librdkafka_as_soon_as_upstreams() -> None:
    # Upstream's own count varies with the machine's load; SafeConsumer may not be worse by
    # more than that noise (it was 5-7 of 12 against upstream's 0-1 before). A burst of load
    # can still tip one round (safe 3 against upstream 0 was seen once in a full parallel
    # run), so a round that fails is run again, up to three rounds; the slow close of before
    # (5-7 of 12) fails each.
    rounds: list[dict[str, int]] = []
    while len(rounds) < 3:
        raised = {"upstream": 0, "safe": 0}
        for _ in range(RUNS):
            for name in raised:
                raised[name] += _close_raises(CLASSES[name])
        rounds.append(raised)
        if raised["safe"] <= raised["upstream"] + 2:
            break
    assert rounds[-1]["safe"] <= rounds[-1]["upstream"] + 2, rounds
