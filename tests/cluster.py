"""A cluster of two brokers for tests that move the group coordinator or restart a broker.

The first node is broker and controller, the second a broker only; both keep a replica of the
offsets partition, whose leader is every group's coordinator, and of every partition of the
share-group state topic (``__share_group_state``, where the share coordinator keeps what each share
group acknowledged), so a share group's state outlives a SIGKILL of either broker. Used by
test_coordinator_moves and by the soaks' broker faults.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from safeconsumer.testing import KafkaTestKit, wait_until
from safeconsumer.testing._local import KAFKA_VERSION, LocalBroker, _java, kafka_lib_dir

#: A broker SIGKILLed by a fault is back once the controller let its session go: 10 s (the
#: default 9 s; the test brokers' 30 s guards against CPU starvation in the parallel suite, which
#: the soak, run alone, does not meet).
FAULT_SETTINGS = {"broker.session.timeout.ms": "10000"}

#: The cluster's own clients log librdkafka's lines here, never to stderr (without a ``logger``
#: librdkafka prints them there itself: the admin client lives until the brokers stop, and said so).
CLIENT_LOG = logging.getLogger("tests.cluster.librdkafka")
# A handler of its own: with none anywhere up the chain (a soak's process), logging's last resort
# would print its ERRORs to stderr (a broker fault's disconnects); under pytest they propagate to
# its capture.
CLIENT_LOG.addHandler(logging.NullHandler())

#: Both brokers keep a replica of the offsets partition and of the share-group state topic; leaders
#: move only when told. The state topic's writes need one replica in sync (min.isr 1, as the test
#: brokers' table sets; Kafka's default of 2 would refuse every share acknowledgement while a broker
#: is down).
CLUSTER_SETTINGS = {
    "offsets.topic.replication.factor": "2",
    "share.coordinator.state.topic.replication.factor": "2",
    "share.coordinator.state.topic.min.isr": "1",
    "auto.leader.rebalance.enable": "false",
}
OFFSETS_TOPIC = "__consumer_offsets"
MOVE_LEADER = Path(__file__).parent / "integration" / "java" / "MoveLeader.java"
#: What a broker logs once it no longer answers as the coordinator (its groups unloaded).
UNLOADED = f"Finished unloading metadata for {OFFSETS_TOPIC}-0"


class Cluster:
    """Two brokers; :meth:`move_coordinator` hands every group's coordinator to the other one."""

    def __init__(self, settings: Mapping[str, str] | None = None, *, version: str = KAFKA_VERSION) -> None:
        """``settings``: broker settings for both nodes, after :data:`CLUSTER_SETTINGS`; ``version``:
        their Apache Kafka release."""
        self.settings = {**CLUSTER_SETTINGS, **(settings or {})}
        self.version = version
        self.first = LocalBroker(self.settings, version=version)
        self.second: LocalBroker | None = None
        #: Restarts run on this one thread, which lives as long as the cluster: a broker JVM dies
        #: with the thread that started it (PR_SET_PDEATHSIG), and a fault's thread may end first.
        self._launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cluster-launcher")

    def start(self) -> None:
        self.first.start()
        self.second = LocalBroker(self.settings, joins=self.first, node_id=2, version=self.version)
        self.second.start()
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "logger": CLIENT_LOG}
        self.admin = AdminClient(conf)
        wait_until(lambda: len(self.admin.list_topics(timeout=5).brokers) == 2, timeout=60, what="both brokers up")

    @property
    def bootstrap_servers(self) -> str:
        assert self.second is not None
        return f"{self.first.bootstrap_servers},{self.second.bootstrap_servers}"

    def stop(self) -> None:
        if self.second is not None:
            self.second.stop()
        self.first.stop()
        self._launcher.shutdown()

    def coordinator(self) -> int | None:
        """The broker leading the offsets partition (every group's coordinator), once both replicas are in sync."""
        topics = self.admin.list_topics(OFFSETS_TOPIC, timeout=5).topics
        meta = topics.get(OFFSETS_TOPIC)
        if meta is None or meta.error is not None or 0 not in meta.partitions:
            return None
        partition = meta.partitions[0]
        return int(partition.leader) if len(partition.isrs) == 2 and partition.leader >= 0 else None

    def warm_up(self, kit: KafkaTestKit) -> None:
        """Have the offsets partition created and both its replicas in sync (a first commit does it)."""
        topic = kit.create_topic()
        c = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": kit.name("warm"), "logger": CLIENT_LOG})
        try:

            def committed() -> bool:
                try:
                    c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                except Exception:  # noqa: BLE001 - the coordinator is still coming up; try again
                    return False
                return True

            wait_until(committed, timeout=60, what="a first commit (the offsets partition created)")
        finally:
            c.close()
        wait_until(self.coordinator, timeout=60, what="both replicas of the offsets partition in sync")

    def _unloads(self, broker_id: int) -> int:
        broker = self.first if broker_id == 1 else self.second
        assert broker is not None
        return broker.log_path.read_text(errors="replace").count(UNLOADED)

    def move_coordinator(self) -> int:
        """Make the other broker lead the offsets partition; returns its id once the old one has
        let go (it answers NOT_COORDINATOR from then on, and the client does not know yet)."""
        before = wait_until(self.coordinator, timeout=30, what="the coordinator known") or 0
        target = 2 if before == 1 else 1
        unloads = self._unloads(before)
        command = [_java(), "-cp", f"{kafka_lib_dir(self.version)}/*", str(MOVE_LEADER), self.bootstrap_servers]
        moved = subprocess.run(
            [*command, OFFSETS_TOPIC, "0", str(target)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert moved.returncode == 0, f"moving the coordinator failed:\n{moved.stdout}\n{moved.stderr[-3000:]}"
        wait_until(lambda: self.coordinator() == target, timeout=30, what=f"broker {target} the coordinator")
        wait_until(lambda: self._unloads(before) > unloads, timeout=30, what=f"broker {before} to unload its groups")
        return target

    def restart_second(self, *, down: float = 2.0) -> None:
        """SIGKILL the second broker (no controlled shutdown: its partitions and, when it leads
        the offsets partition, the coordinator vanish at once), then start it again on the same
        ports and data after ``down`` seconds; return once it is back in the cluster.

        The controller refuses the new incarnation (DUPLICATE_BROKER_REGISTRATION) until the old
        one's session expired: the broker is back only ``broker.session.timeout.ms`` after the kill."""
        assert self.second is not None
        self.second.stop_process(sig=signal.SIGKILL)
        time.sleep(down)  # the fault's length: the broker stays down this long
        self._launcher.submit(self.second.start_again).result()
        wait_until(lambda: len(self.admin.list_topics(timeout=5).brokers) == 2, timeout=60, what="both brokers up")


@contextmanager
def running_cluster(settings: Mapping[str, str] | None = None, *, version: str = KAFKA_VERSION) -> Iterator[Cluster]:
    """A started, warmed-up cluster (the offsets partition created, both replicas in sync), stopped at the end."""
    c = Cluster(settings, version=version)
    try:
        c.start()
        kit = KafkaTestKit(c.bootstrap_servers, prefix="warm")
        try:
            c.warm_up(kit)
        finally:
            kit.close()
        yield c
    finally:
        c.stop()
