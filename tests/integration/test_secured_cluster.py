"""A secured cluster (SASL_SSL: SCRAM-SHA-512 over TLS, CA and certificates made at test time).

The broker comes from ``safeconsumer.testing`` (``security="sasl_ssl"``) and re-authenticates
every connection every 3 s (``connections.max.reauth.ms``), so a deleted user is refused
within seconds. What is shown, under every protocol:

- the pause, gate and I8 guarantees hold through it (I8's crash test runs through it too, in
  test_processed_before_stored);
- no password or key reaches a log line (librdkafka's debug output included), telemetry, an
  exception's text or notes, a ``repr()``, or the doctor's output;
- wrong credentials and an untrusted certificate end in :class:`AuthenticationFailedError`
  naming the cause within seconds (raw confluent_kafka retries them silently, for ever);
- credentials refused mid-run (the user deleted) surface the same way, and nothing is lost.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message

from safeconsumer import AuthenticationFailedError, FatalConsumerError, SafeConsumer
from safeconsumer.testing import Broker, KafkaTestKit, Protocol, SaslSsl, unique_name, wait_until
from safeconsumer.testing._secure import make_ca

from ..support import Received, checked_pump, keys, pump
from .test_observability import Otel

ROOT = Path(__file__).resolve().parents[2]

#: The auth_failure_timeout the tests give (the default, 10 s, has its own test), and the slack a
#: busy 2-core machine gets.
TIMEOUT = 4.0
SLACK = 8.0


@pytest.fixture
def untrusted_ca(tmp_path: Path) -> str:
    """A CA that did not sign the broker's certificate."""
    _key, cert = make_ca(tmp_path / "other-ca", "a CA nobody trusts")
    return str(cert)


def _ids(received: Received) -> set[tuple[int, int]]:
    return {(r[1], r[2]) for r in received.records}


def test_pause_intent_and_the_gate_hold_through_a_rebalance(secured_kafka: KafkaTestKit, protocol: Protocol) -> None:
    """A topic mark survives a peer's join; no record of a paused partition is returned (checked on
    every record); after resume every record arrives, none lost."""
    kafka = secured_kafka
    topic, group = kafka.create_topic(partitions=4), kafka.name("g")
    kafka.produce(topic, 200, partitions=4)
    first, got1 = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    second, got2 = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    try:
        first.subscribe([topic])
        checked_pump([(first, got1)], lambda: len(first.assignment()) == 4, timeout=45, what="first owns all")
        first.pause_topics([topic])
        second.subscribe([topic])
        members = [(first, got1), (second, got2)]
        checked_pump(
            members,
            lambda: first.assignment() and second.assignment() and len(got2.records) == 100,
            timeout=60,
            what="the peer to join and read its half",
        )
        assert keys(first.paused()) == keys(first.assignment()), "the topic mark did not cover the new assignment"
        assert not got1.records, "a record of a paused topic was returned"
        first.resume_topics([topic])
        checked_pump(members, lambda: len(got1.records) + len(got2.records) >= 200, timeout=60, what="every record")
        assert _ids(got1) | _ids(got2) == {(p, o) for p in range(4) for o in range(50)}
    finally:
        first.close()
        second.close()


@pytest.mark.kafka_versions
def test_raw_client_retries_a_refused_login_silently(secured_broker: Broker) -> None:
    """Characterization: confluent_kafka's poll() returns nothing while the password is wrong; only an
    error_cb hears of it, once per attempt, for as long as it runs."""
    assert secured_broker.sasl_ssl is not None
    conf = secured_broker.sasl_ssl.client_config(password="wrong-password")
    heard: list[KafkaError] = []
    c = Consumer({**conf, "group.id": unique_name("raw"), "error_cb": heard.append})
    quiet = Consumer({**conf, "group.id": unique_name("raw")})
    try:
        c.subscribe(["any-topic"])
        quiet.subscribe(["any-topic"])
        end = time.monotonic() + 4
        returned = []
        while time.monotonic() < end:
            returned += [m for m in (c.poll(0.2), quiet.poll(0.2)) if m is not None]
        assert returned == [], "poll() returned something"
        refused = [e for e in heard if e.code() == KafkaError._AUTHENTICATION]
        assert len(refused) >= 3, f"expected repeated refusals in 4 s, error_cb heard {heard}"
        assert not any(e.fatal() for e in heard)
    finally:
        c.close()
        quiet.close()


@pytest.mark.parametrize("cause", ["wrong password", "unknown user", "untrusted certificate"])
def test_a_refused_login_is_fatal_within_seconds_naming_the_cause(
    secured_broker: Broker, protocol: Protocol, cause: str, untrusted_ca: str
) -> None:
    assert secured_broker.sasl_ssl is not None
    kit = KafkaTestKit(secured_broker.bootstrap_servers, prefix="refused")
    conf = {**kit.consumer_conf(kit.name("g"), protocol), **secured_broker.client_config}
    if cause == "wrong password":
        conf["sasl.password"] = "wrong-password"
    elif cause == "unknown user":
        conf["sasl.username"] = "nobody-" + unique_name("u")
    else:
        conf["ssl.ca.location"] = untrusted_ca
    c = SafeConsumer(conf, auth_failure_timeout=TIMEOUT)
    started = time.monotonic()
    c.subscribe(["any-topic"])
    with pytest.raises(AuthenticationFailedError) as caught:
        while time.monotonic() - started < TIMEOUT + SLACK + 20:
            c.poll(0.5)
    took = time.monotonic() - started
    assert TIMEOUT - 1 <= took <= TIMEOUT + SLACK, f"raised after {took:.1f}s"
    err = caught.value
    assert isinstance(err, FatalConsumerError) and isinstance(err.args[0], KafkaError)
    if cause == "untrusted certificate":
        assert err.args[0].code() == KafkaError._SSL and "certificate verify failed" in str(err)
    else:
        assert err.args[0].code() == KafkaError._AUTHENTICATION and "invalid credentials" in str(err)
    with pytest.raises(AuthenticationFailedError):
        c.poll(0)  # every later call raises it too
    c.close()


def test_by_default_a_login_refused_for_ten_seconds_is_fatal(secured_broker: Broker) -> None:
    assert secured_broker.sasl_ssl is not None
    conf = {**secured_broker.sasl_ssl.client_config(password="wrong-password"), "group.id": unique_name("g")}
    c = SafeConsumer(conf)
    started = time.monotonic()
    c.subscribe(["any-topic"])
    with pytest.raises(AuthenticationFailedError, match="for 10s"):
        while time.monotonic() - started < 40:
            c.poll(0.5)
    assert 9 <= time.monotonic() - started <= 10 + SLACK
    c.close()


def test_auth_failure_timeout_none_retries_as_upstream_and_the_app_error_cb_hears_every_refusal(
    secured_broker: Broker,
) -> None:
    assert secured_broker.sasl_ssl is not None
    heard: list[KafkaError] = []
    conf = {
        **secured_broker.sasl_ssl.client_config(password="wrong-password"),
        "group.id": unique_name("g"),
        "error_cb": heard.append,
    }
    c = SafeConsumer(conf, auth_failure_timeout=None)
    try:
        c.subscribe(["any-topic"])
        end = time.monotonic() + 13  # past the default timeout
        while time.monotonic() < end:
            assert c.poll(0.5) is None
        assert sum(e.code() == KafkaError._AUTHENTICATION for e in heard) >= 5, heard
    finally:
        c.close()
    with pytest.raises(ValueError, match="auth_failure_timeout"):
        SafeConsumer(conf, auth_failure_timeout=0)


def _own_user(broker: Broker, prefix: str, records: int) -> tuple[SaslSsl, str, str, KafkaTestKit, str, str]:
    """A user of its own on the secured broker, and a kit with a 2-partition topic holding
    ``records`` records and a group name: (sasl, user, password, kit, topic, group)."""
    sasl = broker.sasl_ssl
    assert sasl is not None
    user, password = unique_name(prefix), "Pw-" + unique_name("p")
    sasl.set_user(user, password)
    kit = KafkaTestKit(broker.bootstrap_servers, prefix=prefix, client_config=broker.client_config)
    topic, group = kit.create_topic(partitions=2), kit.name("g")
    kit.produce(topic, records, partitions=2)
    return sasl, user, password, kit, topic, group


def test_credentials_deleted_mid_run_surface_and_nothing_is_lost(secured_broker: Broker, protocol: Protocol) -> None:
    """A member works with its own user; the user is deleted while it works. It raises
    AuthenticationFailedError; once a member with valid credentials takes over, every record not
    finished by the first is delivered (at least once), and nothing past an unfinished record was
    committed."""
    sasl, user, password, kit, topic, group = _own_user(secured_broker, "deleted", 100)
    conf = {**kit.consumer_conf(group, protocol), **sasl.client_config(username=user, password=password)}
    worker, done = SafeConsumer(conf, auth_failure_timeout=TIMEOUT), Received()
    try:
        worker.subscribe([topic])
        pump([(worker, done)], lambda: len(done.records) >= 20, timeout=45, what="the worker to process 20")
        sasl.delete_user(user)
        deleted = time.monotonic()
        kit.produce(topic, 100, partitions=2, start=100)
        with pytest.raises(AuthenticationFailedError, match="refusing this consumer's login"):
            pump([(worker, done)], lambda: False, timeout=60, what="the worker to surface the refusal")
        assert time.monotonic() - deleted < TIMEOUT + 3 + SLACK + 50  # refusal + timeout (+ close's wait)
    finally:
        worker.close()  # closing a stopped consumer is allowed and does nothing
    committed = kit.committed(group, topic, 2)
    finished = _ids(done)
    for partition, offset in committed.items():
        assert all((partition, o) in finished for o in range(offset)), f"committed {committed} past unfinished"
    nxt, got = SafeConsumer(kit.consumer_conf(group, protocol)), Received()
    try:
        nxt.subscribe([topic])
        checked_pump(
            [(nxt, got)], lambda: finished | _ids(got) >= {(p, o) for p in range(2) for o in range(100)}, timeout=90,
            what="the next member to deliver everything the deleted worker had not finished",
        )  # fmt: skip
    finally:
        nxt.close()


def test_no_secret_reaches_logs_telemetry_errors_reprs_or_notes(
    secured_broker: Broker, protocol: Protocol, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """Everything observable from a consumer's life on the secured cluster, librdkafka's debug output
    of every context included, is searched for the password and the broker's keystore password."""
    sasl, user, password, kit, topic, group = _own_user(secured_broker, "leak", 20)
    rdkafka_log = logging.getLogger("test.rdkafka")
    otel = Otel()
    texts: list[str] = []
    caplog.set_level(logging.DEBUG)
    conf = {
        **kit.consumer_conf(group, protocol),
        **sasl.client_config(username=user, password=password),
        "debug": "all",
        "logger": rdkafka_log,
    }
    c, got = SafeConsumer(conf, auth_failure_timeout=TIMEOUT, **otel.options()), Received()
    try:
        texts += [repr(c), str(c)]
        c.subscribe([topic])
        last: list[Message] = []

        def read() -> None:
            msg = c.poll(0.1)
            got.add(msg)
            if msg is not None and msg.error() is None:
                last[:] = [msg]
                with c.process(msg):  # a span per record
                    pass

        wait_until(lambda: len(got.records) == 20, timeout=45, what="every record", step=read)
        c.pause_topics([topic])
        texts += [repr(c.pause_state()), repr(c.assignment()), repr(c.paused()), repr(last)]
        c.resume_topics([topic])
        c.commit(asynchronous=False)
        sasl.delete_user(user)  # and a fatal error: its text, args and notes
        with pytest.raises(AuthenticationFailedError) as caught:
            pump([(c, got)], lambda: False, timeout=60, what="the refusal")
        err = caught.value
        texts += [str(err), repr(err), repr(err.args), *getattr(err, "__notes__", [])]
    finally:
        c.close()
    with pytest.raises(AuthenticationFailedError) as closed:
        c.poll(0)  # a later call: the same error again
    texts += [str(closed.value), *getattr(closed.value, "__notes__", [])]
    texts += [r.getMessage() for r in caplog.records]
    texts.append(otel.exported_text())
    out, errs = capfd.readouterr()
    texts += [out, errs]
    everything = "\n".join(texts)
    assert len(caplog.records) > 100, "librdkafka's debug output did not reach the log"
    assert "SCRAM" in everything, "the SASL exchange was not in the debug output searched"
    tls = _keystore_password(secured_broker)
    for secret in (password, tls):
        assert secret not in everything, "a secret reached a log line, telemetry, an error or a repr"


def _keystore_password(broker: Broker) -> str:
    assert broker.log_path is not None
    return (broker.log_path.parent / "tls" / "keystore.pass").read_text()


def _doctor(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "safeconsumer", "doctor", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def consumer_config_file(secured_broker: Broker, tmp_path: Path) -> Iterator[Path]:
    """The members' config as the doctor reads it (--consumer-config), credentials included."""
    path = tmp_path / "consumer.properties"
    path.touch(mode=0o600)
    path.write_text("".join(f"{k}={v}\n" for k, v in secured_broker.client_config.items()))
    yield path


def test_the_doctor_reads_a_group_on_the_secured_cluster_and_prints_no_secret(
    secured_kafka: KafkaTestKit, secured_broker: Broker, protocol: Protocol, consumer_config_file: Path
) -> None:
    assert secured_broker.sasl_ssl is not None
    topic, group = secured_kafka.create_topic(partitions=2), secured_kafka.name("g")
    c, got = SafeConsumer(secured_kafka.consumer_conf(group, protocol)), Received()
    try:
        c.subscribe([topic])
        pump([(c, got)], lambda: len(c.assignment()) == 2, timeout=45, what="the member to own both partitions")
        base = ["--bootstrap-servers", secured_broker.bootstrap_servers, "--group", group]
        for extra in (["--json"], []):
            done = _doctor([*base, "--consumer-config", str(consumer_config_file), *extra])
            assert done.returncode == 0, (done.stdout, done.stderr)
            if extra:
                report = json.loads(done.stdout)
                assert report["healthy"] is True and report["state"] == "stable", report
            for secret in (secured_broker.sasl_ssl.password, _keystore_password(secured_broker)):
                assert secret not in done.stdout + done.stderr
        started = time.monotonic()
        wrong = [*base, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-512"]
        wrong += ["-X", f"sasl.username={secured_broker.sasl_ssl.username}", "-X", "sasl.password=not-the-password"]
        wrong += ["-X", f"ssl.ca.location={secured_broker.sasl_ssl.ca_location}", "--timeout", "5"]
        done = _doctor(wrong)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "authentication failed" in done.stderr and "invalid credentials" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "not-the-password" not in done.stdout + done.stderr
        assert time.monotonic() - started < 20
    finally:
        c.close()


def test_the_secured_broker_refuses_plaintext_clients(secured_broker: Broker) -> None:
    """The control: the listener the tests use really is secured (a client without the settings
    gets nothing)."""
    c = Consumer({"bootstrap.servers": secured_broker.bootstrap_servers, "group.id": unique_name("g")})
    try:
        with pytest.raises(KafkaException):
            c.list_topics(timeout=3)
    finally:
        c.close()
