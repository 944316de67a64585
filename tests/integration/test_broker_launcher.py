"""The broker launcher: one entry point, overrides, logs, and no JVM left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from safeconsumer.testing import (
    Broker,
    BrokerOverridesUnsupported,
    BrokerStartError,
    KafkaTestKit,
    start_broker,
    wait_until,
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; it only waits to be reaped.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_overrides_apply_to_a_started_broker(kafka_broker_factory: Callable[[Mapping[str, str]], Broker]) -> None:
    broker = kafka_broker_factory({"group.max.size": "2", "group.consumer.max.size": "2"})
    assert broker.bootstrap_servers.startswith("127.0.0.1:")
    if broker.kind == "local":
        assert broker.log_path is not None and "group.max.size = 2" in broker.log_path.read_text()
    kit = KafkaTestKit(broker.bootstrap_servers)
    kit.create_topic(partitions=1)
    kit.close()


def test_overrides_cannot_apply_to_an_external_cluster(monkeypatch: pytest.MonkeyPatch, kafka_broker: Broker) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_broker.bootstrap_servers)
    with (
        pytest.raises(BrokerOverridesUnsupported, match=r"group\.max\.size.*KAFKA_BOOTSTRAP_SERVERS"),
        start_broker({"group.max.size": "2"}),
    ):
        pass
    with start_broker() as broker:
        assert broker.kind == "external" and broker.bootstrap_servers == kafka_broker.bootstrap_servers


def test_an_external_cluster_that_never_answers_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    with pytest.raises(BrokerStartError, match=r"127\.0\.0\.1:1"), start_broker(startup_timeout=3):
        pass


def test_module_runs_a_broker_in_the_foreground_and_leaves_no_jvm() -> None:
    # The child runs the local launcher whatever broker this session uses (external, container).
    env = {**os.environ, "SAFECONSUMER_BROKER": "local"}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "safeconsumer.testing", "--set", "group.max.size=3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), address
        kit = KafkaTestKit(address)
        kit.create_topic(partitions=1)
        kit.close()
        jvms = _jvms_listening_on(address.rsplit(":", 1)[1])
        assert jvms, "no JVM found for the broker"
        # Killed hard, the launcher cannot clean up; the kernel must take the JVM with it.
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until(lambda: not any(_alive(pid) for pid in jvms), timeout=15, what="the orphaned JVM to die")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _jvms_listening_on(port: str) -> list[int]:
    """Broker JVMs started by safeconsumer.testing whose server.properties names ``port``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kafka.Kafka" not in cmdline or len(cmdline) < 2:
            continue
        props = Path(cmdline[-2].decode())
        if "safeconsumer-kafka-" in str(props) and props.exists() and f"127.0.0.1:{port}" in props.read_text():
            pids.append(int(entry.name))
    return pids
