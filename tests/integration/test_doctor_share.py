"""``safeconsumer doctor`` on share groups (KIP-932), against the real broker.

librdkafka's admin API does not describe share groups: it answers one as an empty ``DEAD`` classic
group (characterized first), so a doctor built on it alone would call a busy share group empty.
The doctor asks the coordinator itself and reports the share group's members, settings, where it
stands on each partition, and what causes its incidents: a ``latest`` start nobody chose that skips
records, a lock shorter than the processing, records redelivered without progress. Members poll
while the doctor runs (as an operator sees a live group), in both acknowledgement modes where the
members' mode matters.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Message, ShareConsumer
from confluent_kafka.admin import AdminClient

from safeconsumer.group._describe import describe_group
from safeconsumer.group._dlq import DLQ_SHARE_VERSION, share_version
from safeconsumer.health._share_look import describe_share_group
from safeconsumer.share import SafeShareConsumer
from safeconsumer.testing import Broker, KafkaTestKit, wait_until

from ..support import broker_dlq, set_group_config

#: Each runs on Kafka 4.4.0 and on 4.3.1 (brokers upgrade before clients).
pytestmark = pytest.mark.kafka_versions

ROOT = Path(__file__).resolve().parents[2]

MODES = ("implicit", "explicit")


def _conf(kafka: KafkaTestKit, group: str, client_id: str, mode: str = "implicit") -> dict[str, Any]:
    return {**kafka.client_config, "group.id": group, "client.id": client_id, "share.acknowledgement.mode": mode}


def _poll_all(members: Sequence[ShareConsumer], explicit: bool) -> int:
    got = 0
    for c in members:
        for m in c.poll(0.2):
            if m.error() is None:
                got += 1
                if explicit:
                    c.acknowledge(m)
        if explicit:
            c.commit_sync()
    return got


def _wait_for_group(kit: KafkaTestKit, group: str, step: Callable[[], object]) -> None:
    """Until the coordinator describes ``group`` as a share group; ``step`` (a member polling) meanwhile."""

    def exists() -> bool:
        step()
        return describe_share_group(kit.client_config, kit.bootstrap_servers, group, 10) is not None

    wait_until(exists, timeout=30, what="the share group to exist")


def _dlq_where_the_cluster_has_them(kit: KafkaTestKit, group: str) -> None:
    """On a cluster with share-group DLQs (Kafka 4.4) a group without one is a finding
    (``share_no_dlq``): the tests' groups get one there, so that what they look for is all there is."""
    if (share_version(kit.client_config, 10) or 0) >= DLQ_SHARE_VERSION:
        broker_dlq(kit, group)


def _doctor(args: list[str], keep_going: Callable[[], object] = lambda: None) -> subprocess.CompletedProcess[str]:
    """Run the doctor as a process; ``keep_going`` runs meanwhile (members polling)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "safeconsumer", "doctor", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 90
    while child.poll() is None:
        assert time.monotonic() < deadline, "the doctor did not finish in 90 s"
        keep_going()
        time.sleep(0.05)
    out, err = child.communicate(timeout=10)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def test_raw_admin_api_describes_a_live_share_group_as_an_empty_dead_classic_group(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    _dlq_where_the_cluster_has_them(kafka, group)
    c = ShareConsumer(_conf(kafka, group, "worker"))
    admin = AdminClient(kafka.client_config)
    try:
        c.subscribe([topic])
        kafka.produce(topic, 4, partitions=2)

        def member_in_group() -> bool:
            c.poll(0.2)
            found = describe_share_group(kafka.client_config, kafka.bootstrap_servers, group, 10)
            return found is not None and len(found.members) == 1

        wait_until(member_in_group, timeout=30, what="the share group's coordinator to list the member")
        described = describe_group(admin, group, 10)
        assert described.members == [] and described.state.name == "DEAD" and described.type.name == "CLASSIC"
    finally:
        c.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_share_group_is_described_with_its_members_settings_and_where_it_stands(
    kafka: KafkaTestKit, mode: str
) -> None:
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    _dlq_where_the_cluster_has_them(kafka, group)
    kafka.produce(topic, 20, partitions=2)
    # More members than partitions: a share group's members all get records.
    members = [SafeShareConsumer(_conf(kafka, group, f"worker-{i}", mode), start="earliest") for i in range(3)]
    explicit = mode == "explicit"
    got = [0]
    try:
        for c in members:
            c.subscribe([topic])

        def step() -> None:
            got[0] += _poll_all(members, explicit)

        def processed() -> bool:
            step()
            return got[0] >= 20

        wait_until(processed, timeout=45, what="the group to process the 20 records")

        def settled() -> bool:
            step()
            found = describe_share_group(kafka.client_config, kafka.bootstrap_servers, group, 10)
            return found is not None and len(found.members) == 3 and all(p.lag == 0 for p in found.partitions)

        wait_until(settled, timeout=30, what="three members and no lag")
        done = _doctor(["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"], step)
        assert done.returncode == 0, (done.stdout, done.stderr)
        report = json.loads(done.stdout)
        assert report["schema"] == 1 and report["healthy"] is True and report["findings"] == []
        assert report["protocol"] == "share" and report["state"] == "stable" and report["assignor"]
        assert report["coordinator"]["port"] == int(kafka.bootstrap_servers.rsplit(":", 1)[1])
        assert report["limit"]["setting"] == "group.share.max.size" and report["limit"]["value"] > 0
        assert sorted(m["client_id"] for m in report["members"]) == ["worker-0", "worker-1", "worker-2"]
        assert {m["member_id"] for m in report["members"]} and all(m["instance_id"] is None for m in report["members"])
        assert {t for m in report["members"] for t in m["assignment"]} == {topic}
        share = report["share"]
        assert share["start"] == "earliest" and share["start_set_on_group"] is True
        assert share["lock_ms"] > 0 and share["delivery_count_limit"] > 0 and share["lag"] == 0
        assert share["in_flight"] is None and share["archived"] is None  # not told to clients: said, not guessed
        rows = {(r["topic"], r["partition"]): r for r in share["partitions"]}
        assert set(rows) == {(topic, 0), (topic, 1)}
        assert sum(r["log_end"] - r["log_start"] for r in rows.values()) == 20
        assert all(r["lag"] == 0 for r in rows.values())
        assert "migration" not in report and "share_check" not in report
        text = _doctor(["--bootstrap-servers", kafka.bootstrap_servers, "--group", group], step)
        assert text.returncode == 0, (text.stdout, text.stderr)
        assert "protocol     share" in text.stdout and "start        earliest (set on the group)" in text.stdout
        assert "healthy: no findings" in text.stdout and text.stderr == ""
    finally:
        for c in members:
            c.close()


def test_a_share_group_starting_at_latest_by_default_is_found_with_the_records_it_skips(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    _dlq_where_the_cluster_has_them(kafka, group)
    kafka.produce(topic, 10, partitions=2)
    c = ShareConsumer(_conf(kafka, group, "late-worker"))  # raw: the broker's default start, latest
    try:
        c.subscribe([topic])
        received: list[int] = []

        _wait_for_group(kafka, group, lambda: received.extend(1 for m in c.poll(0.2) if m.error() is None))
        done = _doctor(
            ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"], lambda: c.poll(0.1)
        )
        assert done.returncode == 1, (done.stdout, done.stderr)
        report = json.loads(done.stdout)
        assert report["share"]["start"] == "latest" and report["share"]["start_set_on_group"] is False
        (finding,) = [f for f in report["findings"] if f["code"] == "share_start_latest"]
        assert finding["details"]["unstarted_records"] == 10, finding
        assert received == []  # what the finding says: the member got none of the 10
    finally:
        c.close()


def test_a_lock_shorter_than_the_processing_is_found(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _dlq_where_the_cluster_has_them(kafka, group)
    set_group_config(kafka, group, share_record_lock_duration_ms="2000", share_auto_offset_reset="earliest")
    kafka.produce(topic, 5)
    c = SafeShareConsumer(_conf(kafka, group, "worker"))
    try:
        c.subscribe([topic])
        _wait_for_group(kafka, group, lambda: c.poll(0.2))
        base = ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"]
        keep: Callable[[], object] = lambda: c.poll(0.1)  # noqa: E731
        cases = {"3": ("lock_too_short", 1), "0.01": ("batch_outlives_lock", 1), "0.001": (None, 0)}
        for seconds, (code, status) in cases.items():
            done = _doctor([*base, "--processing-time", seconds], keep)
            assert done.returncode == status, (seconds, done.stdout, done.stderr)
            report = json.loads(done.stdout)
            assert report["share"]["lock_ms"] == 2000 and report["share"]["processing_time"] == float(seconds)
            codes = [f["code"] for f in report["findings"]]
            assert codes == ([code] if code else []), (seconds, codes)
        done = _doctor([*base, "--processing-time", "0.01", "-X", "max.poll.records=100"], keep)
        assert done.returncode == 0, (done.stdout, done.stderr)  # 100 x 0.01 s = 1 s: within the 2 s lock
    finally:
        c.close()


def test_records_redelivered_without_progress_are_found_by_observing(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _dlq_where_the_cluster_has_them(kafka, group)
    set_group_config(kafka, group, share_record_lock_duration_ms="1000", share_auto_offset_reset="earliest")
    kafka.produce(topic, 5)
    # Explicit mode, never acknowledging: it holds its batch past the lock, as slow work does.
    holder = ShareConsumer(_conf(kafka, group, "stuck-worker", "explicit"))
    held: list[Message] = []
    try:
        holder.subscribe([topic])

        def acquired() -> bool:
            held.extend(m for m in holder.poll(0.2) if m.error() is None)
            return bool(held)

        wait_until(acquired, timeout=30, what="the member to acquire records")
        base = ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"]
        done = _doctor([*base, "--observe", "3"])
        report = json.loads(done.stdout)
        assert done.returncode == 1, json.dumps([report["share"], report.get("observed")])
        (finding,) = [f for f in report["findings"] if f["code"] == "share_no_progress"]
        (stuck,) = finding["details"]["partitions"]
        # Nothing was ever acknowledged there: the start (once the broker wrote one) is the log's.
        assert stuck["topic"] == topic and stuck["start_offset"] in (None, 0), stuck
        assert report["observed"]["seconds"] == 3 and "static_membership" not in [f["code"] for f in report["findings"]]
        # Once the member processes what it is handed again, the same watch finds the group moving on.
        for m in held:  # its locks ran out: the broker keeps none of these
            holder.acknowledge(m, AcknowledgeType.ACCEPT)
        holder.commit_sync()

        def caught_up() -> bool:
            for m in holder.poll(0.2):
                holder.acknowledge(m, AcknowledgeType.ACCEPT)
            holder.commit_sync()
            found = describe_share_group(kafka.client_config, kafka.bootstrap_servers, group, 10)
            return found is not None and all(p.lag == 0 for p in found.partitions)

        wait_until(caught_up, timeout=30, what="the group's lag to reach 0")
        done = _doctor([*base, "--observe", "3"], lambda: holder.poll(0.1))
        assert done.returncode == 0, (done.stdout, done.stderr)
    finally:
        holder.close()


def test_a_share_group_without_members_is_an_empty_share_group(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _dlq_where_the_cluster_has_them(kafka, group)
    c = ShareConsumer(_conf(kafka, group, "worker"))
    c.subscribe([topic])
    _wait_for_group(kafka, group, lambda: c.poll(0.2))
    c.close()
    done = _doctor(["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"])
    assert done.returncode == 1, (done.stdout, done.stderr)
    report = json.loads(done.stdout)
    assert report["protocol"] == "share" and report["members"] == []
    assert [f["code"] for f in report["findings"]] == ["group_empty"]
    assert "share group" in report["findings"][0]["message"]


def test_the_doctor_reads_a_share_group_on_the_secured_cluster_and_prints_no_secret(
    secured_kafka: KafkaTestKit, secured_broker: Broker, tmp_path: Path
) -> None:
    """SASL_SSL with SCRAM-SHA-512: the doctor's own protocol client logs in as librdkafka does."""
    assert secured_broker.sasl_ssl is not None
    config = tmp_path / "consumer.properties"
    config.touch(mode=0o600)
    config.write_text("".join(f"{k}={v}\n" for k, v in secured_broker.client_config.items()))
    topic, group = secured_kafka.create_topic(partitions=2), secured_kafka.name("g")
    _dlq_where_the_cluster_has_them(secured_kafka, group)
    c = SafeShareConsumer(_conf(secured_kafka, group, "secure-worker"), start="earliest")
    try:
        c.subscribe([topic])
        _wait_for_group(secured_kafka, group, lambda: c.poll(0.2))
        base = ["--bootstrap-servers", secured_broker.bootstrap_servers, "--group", group]
        done = _doctor([*base, "--consumer-config", str(config), "--json"], lambda: c.poll(0.1))
        assert done.returncode == 0, (done.stdout, done.stderr)
        report = json.loads(done.stdout)
        assert report["protocol"] == "share" and [m["client_id"] for m in report["members"]] == ["secure-worker"]
        assert secured_broker.sasl_ssl.password not in done.stdout + done.stderr
    finally:
        c.close()


def test_a_share_group_at_the_broker_s_size_limit_is_found(full_group_kafka: KafkaTestKit) -> None:
    """The full-group broker allows 2 members per share group (group.share.max.size)."""
    kafka = full_group_kafka
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _dlq_where_the_cluster_has_them(kafka, group)
    members = [SafeShareConsumer(_conf(kafka, group, f"worker-{i}"), start="earliest") for i in range(2)]
    try:
        for c in members:
            c.subscribe([topic])

        def both_in() -> bool:
            _poll_all(members, explicit=False)
            found = describe_share_group(kafka.client_config, kafka.bootstrap_servers, group, 10)
            return found is not None and len(found.members) == 2

        wait_until(both_in, timeout=30, what="two members in the share group")
        done = _doctor(
            ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"],
            lambda: _poll_all(members, explicit=False),
        )
        assert done.returncode == 1, (done.stdout, done.stderr)
        (finding,) = json.loads(done.stdout)["findings"]
        assert finding["code"] == "group_size" and finding["severity"] == "critical"
        assert finding["details"] == {"members": 2, "limit": 2, "setting": "group.share.max.size"}
    finally:
        for c in members:
            c.close()


def test_records_archived_and_given_back_while_watched_are_read_from_the_state_log(kafka: KafkaTestKit) -> None:
    """A member releases every record it gets; at the group's limit of 2 deliveries the broker
    archives each. Records keep arriving while the doctor watches, so what happens in its window is
    read from the share-group state log: records given back, records archived at the limit."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _dlq_where_the_cluster_has_them(kafka, group)
    set_group_config(
        kafka,
        group,
        share_auto_offset_reset="earliest",
        share_delivery_count_limit="2",
        share_record_lock_duration_ms="15000",
    )
    member = ShareConsumer(_conf(kafka, group, "refusing-worker", "explicit"))
    produced = [0]
    calls = [0]

    def refuse_everything() -> None:
        calls[0] += 1
        if calls[0] % 6 == 0:  # a new record about every 0.3 s
            kafka.produce(topic, 1, partitions=1, start=produced[0])
            produced[0] += 1
        for m in member.poll(0.1):
            if m.error() is None:
                member.acknowledge(m, AcknowledgeType.RELEASE)
        member.commit_sync()

    try:
        member.subscribe([topic])

        _wait_for_group(kafka, group, refuse_everything)
        done = _doctor(
            ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json", "--observe", "5"],
            refuse_everything,
        )
        report = json.loads(done.stdout)
        log = report["observed"]["state_log"]
        assert done.returncode == 1, (log, done.stderr)
        assert log["archived"] >= 1 and log["given_back"] >= 1 and log["unreadable"] == 0, log
        assert set(log["archived_by_delivery_count"]) == {"2"}, log  # each archived at the limit
        assert list(log["archived_offsets"]) == [f"{topic} [0]"]
        (finding,) = [f for f in report["findings"] if f["code"] == "share_archived"]
        assert finding["details"]["at_limit"] == log["archived"]
        text = _doctor(
            ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--observe", "2"], refuse_everything
        )
        assert "state log:" in text.stdout and "archived" in text.stdout, text.stdout
    finally:
        member.close()


@pytest.mark.kafka_versions("4.4.0")
def test_the_doctor_reports_the_group_s_broker_dlq_and_flags_one_it_cannot_write(kafka: KafkaTestKit) -> None:
    topic = kafka.create_topic(partitions=1)
    cases = {"none": "share_no_dlq", "healthy": None, "not enabled": "share_dlq_cannot_copy"}
    for case, code in cases.items():
        group = kafka.name("g")
        dlq = None
        if case != "none":
            dlq = broker_dlq(kafka, group, enabled=case == "healthy")
        c = ShareConsumer(_conf(kafka, group, "worker"))
        try:
            c.subscribe([topic])
            _wait_for_group(kafka, group, lambda: c.poll(0.2))  # noqa: B023 - called before the next case
            base = ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group]
            done = _doctor([*base, "--json"], lambda: c.poll(0.1))  # noqa: B023
            assert done.returncode == (1 if code else 0), (case, done.stdout, done.stderr)
            report = json.loads(done.stdout)
            assert report["share"]["dlq"]["topic"] == dlq and report["share"]["dlq"]["share_version"] == 2
            assert [f["code"] for f in report["findings"]] == ([code] if code else []), case
            if case == "not enabled":
                assert "errors.deadletterqueue.group.enable=true" in report["findings"][0]["message"]
                text = _doctor(base, lambda: c.poll(0.1))  # noqa: B023
                assert f"dlq          {dlq} (records; cannot be written" in text.stdout, text.stdout
        finally:
            c.close()


@pytest.mark.kafka_versions("4.3.1")
def test_the_doctor_says_nothing_of_dlqs_on_a_cluster_without_them(kafka: KafkaTestKit) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    c = ShareConsumer(_conf(kafka, group, "worker"))
    try:
        c.subscribe([topic])
        _wait_for_group(kafka, group, lambda: c.poll(0.2))
        done = _doctor(
            ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"], lambda: c.poll(0.1)
        )
        report = json.loads(done.stdout)
        assert report["share"]["dlq"] is None and "dlq" not in {f["code"] for f in report["findings"]}
    finally:
        c.close()
