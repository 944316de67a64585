"""``safeconsumer doctor`` against live groups on the real broker (issue: group health).

Each finding comes from a real scenario: two applications sharing a group id, a group at the
size limit of a broker started with a small one; a healthy group has none. The doctor runs as
a process, as an operator runs it, while the members keep polling.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol

from ..support import Received, full_group, pump, pump_for

ROOT = Path(__file__).resolve().parents[2]


def _doctor(
    args: list[str], members: Sequence[tuple[Consumer, Received]], *, script: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run the doctor while ``members`` keep polling (so the group stays as it is)."""
    command = [str(Path(sys.executable).parent / "safeconsumer")] if script else [sys.executable, "-m", "safeconsumer"]
    child = subprocess.Popen(
        [*command, "doctor", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    pump(members, lambda: child.poll() is not None, timeout=60, what="the doctor to finish")
    out, err = child.communicate(timeout=10)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def _member(kafka: KafkaTestKit, group: str, protocol: Protocol, client_id: str, topic: str) -> SafeConsumer:
    c = SafeConsumer({**kafka.consumer_conf(group, protocol), "client.id": client_id})
    c.subscribe([topic])
    return c


def test_a_healthy_group_exits_0_and_its_json_describes_it(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    c = _member(kafka, group, protocol, "orders", topic)
    members = [(c, Received())]
    try:
        pump(members, lambda: len(c.assignment()) == 2, timeout=45, what="the member to own both partitions")
        done = _doctor(["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"], members)
        assert done.returncode == 0, (done.stdout, done.stderr)
        report = json.loads(done.stdout)
        assert report["schema"] == 1 and report["healthy"] is True and report["findings"] == []
        assert report["group"] == group and report["state"] == "stable"
        assert report["protocol"] == ("consumer" if protocol == "consumer" else "classic")
        assert report["coordinator"]["port"] == int(kafka.bootstrap_servers.rsplit(":", 1)[1])
        assert report["limit"]["setting"] == ("group.consumer.max.size" if protocol == "consumer" else "group.max.size")
        (member,) = report["members"]
        assert member["client_id"] == "orders" and member["member_id"] == c.memberid()
        assert member["assignment"] == {topic: [0, 1]} and member["instance_id"] is None
    finally:
        c.close()


def test_two_applications_sharing_a_group_id_are_found(kafka: KafkaTestKit, protocol: Protocol) -> None:
    orders, invoices, group = kafka.create_topic(partitions=2), kafka.create_topic(partitions=2), kafka.name("g")
    a = _member(kafka, group, protocol, "orders-app", orders)
    b = _member(kafka, group, protocol, "billing-app", invoices)
    members = [(a, Received()), (b, Received())]
    try:
        pump(members, lambda: len(a.assignment()) == 2 == len(b.assignment()), timeout=60, what="both apps assigned")
        args = ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group]
        human = _doctor(args, members, script=True)  # the console script, human output
        assert human.returncode == 1, (human.stdout, human.stderr)
        assert "WARNING shared_group_id" in human.stdout and "what to do: Give each application" in human.stdout
        assert a.memberid() in human.stdout and "billing-app" in human.stdout
        report = json.loads(_doctor([*args, "--json"], members).stdout)
        (finding,) = report["findings"]
        assert finding["code"] == "shared_group_id"
        assert sorted(sorted(app["topics"]) for app in finding["details"]["applications"]) == sorted(
            [[orders], [invoices]]
        )
    finally:
        a.close()
        b.close()


def test_a_group_at_the_broker_s_size_limit_is_found(full_group_kafka: KafkaTestKit, protocol: Protocol) -> None:
    kafka = full_group_kafka
    _topic, group, members = full_group(kafka, protocol)
    try:
        done = _doctor(["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"], list(members))
        assert done.returncode == 1, (done.stdout, done.stderr)
        report = json.loads(done.stdout)
        (finding,) = report["findings"]
        setting = "group.consumer.max.size" if protocol == "consumer" else "group.max.size"
        assert finding["code"] == "group_size" and finding["severity"] == "critical"
        assert finding["details"] == {"members": 2, "limit": 2, "setting": setting}
    finally:
        for c, _ in members:
            c.close()


def test_an_unreachable_cluster_exits_2_with_a_message_and_no_traceback() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    args = ["doctor", "--bootstrap-servers", f"127.0.0.1:{port}", "--group", "g", "--timeout", "3"]
    done = subprocess.run(
        [sys.executable, "-m", "safeconsumer", *args],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"safeconsumer doctor: cannot connect to 127.0.0.1:{port}"), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_fetch_memory_over_the_budget_is_found(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """The busiest member's 8 partitions x 16 consumers per process x a 64 MiB queue each: over 512 MiB."""
    topic, group = kafka.create_topic(partitions=8), kafka.name("g")
    c = _member(kafka, group, protocol, "orders", topic)
    members = [(c, Received())]
    try:
        pump(members, lambda: len(c.assignment()) == 8, timeout=45, what="the member to own 8 partitions")
        args = ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"]
        fits = json.loads(_doctor([*args, "--consumers-per-process", "2"], members).stdout)
        assert fits["healthy"] is True, fits["findings"]
        done = _doctor([*args, "--consumers-per-process", "16", "--fetch-memory-budget", "512MiB"], members)
        assert done.returncode == 1, (done.stdout, done.stderr)
        report = json.loads(done.stdout)
        (finding,) = report["findings"]
        assert finding["code"] == "fetch_memory" and finding["details"]["budget"] == 512 << 20
        memory = report["fetch_memory"]
        assert memory["partitions_per_consumer"] == 8 and memory["consumers_per_process"] == 16
        assert memory["total"] == finding["details"]["total"] > 512 << 20
        assert "queued.max.messages.kbytes" in finding["message"]
    finally:
        c.close()


def test_a_topic_whose_records_a_consumer_config_cannot_receive_is_found(
    kafka: KafkaTestKit, protocol: Protocol, tmp_path: Path
) -> None:
    """max.message.bytes 8 MiB against receive.message.max.bytes 2 MiB (a stall, see test_characterization)."""
    big, group = kafka.name("big"), kafka.name("g")
    kafka.admin.create_topics([NewTopic(big, 1, 1, config={"max.message.bytes": str(8 << 20)})])[big].result()
    kafka.wait_for_partitions(big, 1)
    c = _member(kafka, group, protocol, "media", big)
    members = [(c, Received())]
    config = tmp_path / "consumer.properties"
    config.write_text("# the members' config\nfetch.max.bytes=1048576\nreceive.message.max.bytes=2097152\n")
    try:
        pump(members, lambda: len(c.assignment()) == 1, timeout=45, what="the member to own the partition")
        args = ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json"]
        assert json.loads(_doctor(args, members).stdout)["healthy"] is True, "librdkafka's defaults carry 8 MiB"
        done = _doctor([*args, "--consumer-config", str(config)], members)
        assert done.returncode == 1, (done.stdout, done.stderr)
        report = json.loads(done.stdout)
        (finding,) = report["findings"]
        assert finding["code"] == "record_size" and finding["severity"] == "critical"
        assert finding["details"] == {
            "topic": big,
            "max_message_bytes": 8 << 20,
            "receive_message_max_bytes": 2 << 20,
        }
        assert report["topics"] == {big: {"max_message_bytes": 8 << 20}}
    finally:
        c.close()


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_a_group_that_restarts_members_without_instance_ids_is_found(
    kafka: KafkaTestKit, protocol: Protocol, static: bool
) -> None:
    """Watched for 15 s while one member restarts twice: found without group.instance.id, not with it."""
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    extra = {"group.instance.id": kafka.name("worker")} if static else {}

    def worker() -> SafeConsumer:
        c = SafeConsumer({**kafka.consumer_conf(group, protocol), "client.id": "worker", **extra})
        c.subscribe([topic])
        return c

    a, b = _member(kafka, group, protocol, "api", topic), worker()
    ra, rb = Received(), Received()
    try:
        pump([(a, ra), (b, rb)], lambda: a.assignment() and b.assignment(), timeout=60, what="both assigned")
        args = ["--bootstrap-servers", kafka.bootstrap_servers, "--group", group, "--json", "--observe", "15"]
        child = subprocess.Popen(
            [sys.executable, "-m", "safeconsumer", "doctor", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2):
            pump_for([(a, ra), (b, rb)], 2.0)  # the doctor sees the group as it was first
            b.close()
            b, rb = worker(), Received()
            pump([(a, ra), (b, rb)], b.assignment, timeout=30, what="the restarted member assigned")
        pump([(a, ra), (b, rb)], lambda: child.poll() is not None, timeout=60, what="the doctor to finish")
        report = json.loads(child.communicate(timeout=10)[0])
        codes = [f["code"] for f in report["findings"]]
        if static:
            assert report["observed"]["membership_changes"] == 0, report["observed"]
            assert codes == [], report["findings"]
        else:
            assert report["observed"]["membership_changes"] >= 2 and report["observed"]["restarts"] >= 1
            assert codes == ["static_membership"], report["findings"]
    finally:
        a.close()
        b.close()
