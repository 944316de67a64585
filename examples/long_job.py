"""A long-running job under keepalive: work longer than max.poll.interval.ms without eviction.

    python -m examples.long_job

The job reads a batch, then builds a report from it that takes longer than the group allows
between polls. Inside ``with consumer.keepalive():`` a background thread keeps the member
alive (its partitions parked, nothing consumed early), so the group does not rebalance and
no work is redone; afterwards consumption continues where it stopped.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, start_broker, wait_until

MAX_POLL_MS = 3000


@dataclass
class Outcome:
    records: int
    report_seconds: float
    same_member: bool
    revocations: int


def build_report(values: list[bytes], seconds: float) -> int:
    """Stands in for real work that takes ``seconds`` (here: it only waits)."""
    time.sleep(seconds)
    return sum(len(v) for v in values)


def run(bootstrap: str, records: int = 200) -> Outcome:
    kit = KafkaTestKit(bootstrap, prefix="long-job")
    try:
        topic = kit.create_topic(partitions=2)
        kit.produce(topic, records, partitions=2)
        conf = kit.consumer_conf(
            kit.name("g"), "range", max_poll_interval_ms=MAX_POLL_MS, session_timeout_ms=3000, heartbeat_interval_ms=300
        )
        revocations = 0

        def on_revoke(_c: object, _parts: object) -> None:
            nonlocal revocations
            revocations += 1

        consumer = SafeConsumer(conf, keepalive="off")  # only the explicit keepalive() below
        consumer.subscribe([topic], on_revoke=on_revoke)
        values: list[bytes] = []

        def take() -> None:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                values.append(msg.value() or b"")

        wait_until(lambda: len(values) >= records // 2, timeout=60, what="the first half", step=take)
        member = consumer.memberid()
        seconds = 2.5 * MAX_POLL_MS / 1000
        started = time.monotonic()
        with consumer.keepalive():
            build_report(values, seconds)
        took = time.monotonic() - started
        wait_until(lambda: len(values) >= records, timeout=60, what="the rest", step=take)
        out = Outcome(len(values), took, consumer.memberid() == member, revocations)
        consumer.close()
        return out
    finally:
        kit.close()


def main() -> int:
    with start_broker() as broker:
        out = run(broker.bootstrap_servers)
    print(out, flush=True)
    return 0 if out.same_member and out.revocations == 0 and out.records == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
