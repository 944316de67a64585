"""The describe process: a group described in a child process, whose death (librdkafka #4605's
abort) costs one answer, never the application's process.

No broker here (an address nothing listens on): the child's answer is the admin client's error,
its librdkafka log lines come back through ``logging``, and nothing reaches stderr. The real
broker's side is in ``tests/integration/test_rebalance_causes.py``.
"""

from __future__ import annotations

import logging
import os
import signal

import pytest

from safeconsumer.base._clients import HELPER_LOG, admin_config
from safeconsumer.group._describe_process import DescribeProcess, portable
from safeconsumer.testing import wait_until

NOWHERE = {"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.ms": 10}


def test_a_config_json_cannot_carry_is_described_in_process() -> None:
    conf = admin_config({**NOWHERE, "oauth_cb": lambda _: ("token", 0.0)})
    assert portable(conf) is None
    assert not DescribeProcess(conf, HELPER_LOG).usable


def test_the_logger_stays_with_the_parent() -> None:
    conf = portable(admin_config(NOWHERE))
    assert conf is not None and "logger" not in conf
    assert conf["bootstrap.servers"] == "127.0.0.1:1"


def test_the_child_answers_relays_its_logs_and_writes_nothing_to_stderr(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    process = DescribeProcess(admin_config(NOWHERE), HELPER_LOG)
    try:
        assert process.usable
        assert process.describe("g", timeout=1.0) is None  # no broker: the admin client's error
        assert process.pid is not None, "an error answer keeps the child"
        assert any("describing group 'g' failed" in r.getMessage() for r in caplog.records)
        assert any(r.name == "safeconsumer.librdkafka" for r in caplog.records), "librdkafka's lines come back"
    finally:
        process.stop()
    assert process.pid is None
    assert capfd.readouterr().err == ""


def test_a_child_that_died_costs_one_answer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    process = DescribeProcess(admin_config(NOWHERE), HELPER_LOG)
    try:
        process.describe("g", timeout=0.5)
        first = process.pid
        assert first is not None
        os.kill(first, signal.SIGABRT)  # what librdkafka's failed assertion does
        wait_until(lambda: _gone(first), timeout=5, what="the child ended")
        assert process.describe("g", timeout=0.5) is None
        assert process.pid is None
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("helper process was given up" in m and "exit status -6)" in m for m in warnings), warnings
        process.describe("g", timeout=0.5)
        assert process.pid not in (None, first), "the next describe starts another child"
    finally:
        process.stop()


def _gone(pid: int) -> bool:
    """Whether the process ended (a zombie until its parent reaps it; not reaped here)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_where_no_child_can_work_the_explainer_describes_in_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An executable that is not this Python (an embedding server) starts children that die at once:
    after two of them, none is started any more."""
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    monkeypatch.setattr("sys.executable", "/bin/false")
    process = DescribeProcess(admin_config(NOWHERE), HELPER_LOG)
    assert process.usable
    assert process.describe("g", timeout=0.2) is None
    assert process.usable, "one child that died is not yet a verdict"
    assert process.describe("g", timeout=0.2) is None
    assert not process.usable
    assert any("no describe process could be started here" in r.getMessage() for r in caplog.records)


def test_stop_ends_a_child_at_once_and_final_stops_for_good() -> None:
    process = DescribeProcess(admin_config(NOWHERE), HELPER_LOG)
    process.warm()
    first = process.pid
    assert first is not None
    process.stop()
    assert process.pid is None
    process.warm()
    assert process.pid not in (None, first), "stopped, not closed: another child may start"
    process.stop(final=True)
    process.warm()
    assert process.pid is None and process.describe("g", timeout=0.2) is None
