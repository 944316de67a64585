"""kafka-python's own consumer integration tests, as published, pass with our KafkaConsumer wherever
they pass with kafka-python's (issue: the one-import move for kafka-python applications).

The suite comes from the source distribution of the installed kafka-python on PyPI, fetched at
test time (:mod:`tests.kafka_python.published`), and runs twice against this session's broker: with
``kafka.KafkaConsumer`` as it is, then replaced by ``safeconsumer.kafka_python.KafkaConsumer``.
The only tests allowed to pass with theirs and fail with ours are in :data:`DIFFERENCES`, each with
why (docs/migration.md lists them too); each of those must still fail with ours, so the list stays
true.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .published import run

# Two runs of kafka-python's pure-Python client (its test_group starts four consumer threads) take
# both cores for a minute: alone, after the parallel phase, so they starve no timing-sensitive test.
pytestmark = pytest.mark.serial

#: Published tests that read kafka-python's internals or test its pure-Python machinery.
DIFFERENCES = {
    "test_consumer": "reads consumer._client.cluster, kafka-python's network client (librdkafka is ours)",
    "test_heartbeat_thread": "reads consumer._coordinator, kafka-python's heartbeat thread (librdkafka's is in C)",
    "test_group": "after checking the group's assignment (which passes) it reads consumer._coordinator.heartbeat",
    "test_kafka_version_infer": "expects config['api_version'] inferred from the broker; librdkafka negotiates"
    " API versions per request and does not report a broker version",
    "test_kafka_consumer_unsupported_encoding": "patches kafka.codec to have no gzip; librdkafka decompresses"
    " in C, so the record is read",
}


def test_published_consumer_tests_pass_with_ours_wherever_they_pass_with_kafka_python(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    theirs = run(kafka_bootstrap, "kafka-python", tmp_path / "theirs.xml")
    ours = run(kafka_bootstrap, "safeconsumer", tmp_path / "ours.xml")
    passed_theirs = {name for name, outcome in theirs.items() if outcome == "passed"}
    passed_ours = {name for name, outcome in ours.items() if outcome == "passed"}
    assert len(passed_theirs) >= 10, f"the published suite did not run as expected: {theirs}"
    assert set(ours) == set(theirs), "both runs collect the same tests"
    regressions = passed_theirs - passed_ours - set(DIFFERENCES)
    assert not regressions, f"pass with kafka-python's consumer, fail with ours: {sorted(regressions)}"
    stale = {name for name in DIFFERENCES if ours.get(name) == "passed"}
    assert not stale, f"listed as differences but pass with ours now: {sorted(stale)}"
    assert len(passed_ours) >= len(passed_theirs) - len(DIFFERENCES)
