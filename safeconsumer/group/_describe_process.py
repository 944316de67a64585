"""Describing a group in a child process, so that librdkafka cannot abort the application's.

librdkafka 2.16's admin client aborts the whole process when a coordinator request (describing a
group is one) fails to be sent because the coordinator's connection just dropped: an assertion
in ``rd_kafka_enq_once_del_source_return`` (librdkafka #4605, fix proposed in #5397; seen here
in the soak whenever a broker is killed while a member's rebalance explainer describes its
group). No setting avoids it, and a quiet period after connection errors only narrows the
window. The rebalance explainer describes its group at every rebalance, so a SafeConsumer runs
those requests in a child Python process of its own: an abort ends the child, the rebalance is
counted ``unknown``, and the next describe starts another.

The child is this file run as a script (with ``runpy``; it imports only the
standard library and confluent-kafka, not safeconsumer). It reads the admin config as the first
line of its stdin (JSON: credentials never appear in its arguments or environment), then one
request per line, and answers one JSON line per request on its stdout; its librdkafka log lines
come back the same way and are logged by the parent on ``safeconsumer.librdkafka``. Its stderr
goes nowhere. It ends when its stdin closes (the parent closed it or died).

Where no child can be started (no Python executable, a config value JSON cannot carry such as an
``oauth_cb``, a platform without ``select`` on pipes), :class:`DescribeProcess` says so and the
caller describes in its own process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

#: Children in a row that died before answering, after which none is started any more.
BROKEN_AFTER = 2

#: How the child starts: this file run as ``__main__``, with neither the working directory nor
#: this package's directory on its path (their modules must not shadow the ones it imports).
_BOOT = "import runpy, sys; sys.path.pop(0); runpy.run_path(sys.argv[1], run_name='__main__')"

#: How long a started child has to answer its first request beyond the request's own timeout
#: (a Python interpreter importing confluent-kafka).
START_GRACE = 10.0


def enum_name(value: object) -> str:
    """An admin API enum's name (``ConsumerGroupState.STABLE`` -> ``"STABLE"``), or its text."""
    name = getattr(value, "name", None)
    return str(name if name is not None else value)


def description_fields(group: Any) -> dict[str, Any]:
    """What the explainer keeps of a ``ConsumerGroupDescription``, as plain data (JSON-safe)."""
    members = [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "host": m.host,
            "instance_id": m.group_instance_id,
            "partitions": len(m.assignment.topic_partitions or []) if m.assignment else 0,
        }
        for m in group.members or []
    ]
    return {
        "state": enum_name(group.state),
        "kind": enum_name(getattr(group, "type", "")),
        "assignor": str(group.partition_assignor or ""),
        "members": members,
    }


def portable(conf: Mapping[str, Any]) -> dict[str, Any] | None:
    """``conf`` without its ``logger``, if every other value is one JSON carries as is; else None."""
    out: dict[str, Any] = {}
    for key, value in conf.items():
        if key == "logger":
            continue
        if value is not None and not isinstance(value, (str, int, float, bool)):
            return None
        out[key] = value
    return out


class DescribeProcess:
    """A child process that describes groups (see the module). Not thread-safe: one caller."""

    def __init__(self, conf: Mapping[str, Any], log: logging.Logger) -> None:
        self._conf = portable(conf)
        self._log = log
        self._child: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._next_id = 0
        #: The running child has answered (until then it may still be starting: ``START_GRACE``).
        self._answered = False
        #: Children in a row that died before their first answer: at ``BROKEN_AFTER`` no child can
        #: work here (no confluent_kafka on its path, an executable that is not Python): unusable.
        self._stillborn = 0
        #: No child any more (:meth:`stop` ``final``): the consumer closed.
        self._closed = False
        #: :meth:`stop` is ending the child: its end is no news (logged at DEBUG).
        self._stopping = False
        self._lock = threading.Lock()

    @property
    def usable(self) -> bool:
        """Whether a child can carry this config on this platform."""
        return (
            self._conf is not None
            and self._stillborn < BROKEN_AFTER
            and bool(sys.executable)
            and hasattr(select, "poll")
            and os.path.isfile(__file__)
        )

    @property
    def pid(self) -> int | None:
        """The running child's process id (None: none runs now)."""
        child = self._child
        return None if child is None else child.pid

    def warm(self) -> None:
        """Start the child now, so that a describe soon after does not wait for it to start."""
        with self._lock:
            if self._child is None and not self._closed:
                self._child = self._start()
                self._answered = False

    def describe(self, group_id: str, timeout: float) -> dict[str, Any] | None:
        """The group's :func:`description_fields`; None when it could not be told (no answer in
        time, the broker's error, or the child died: each logged, and a dead child replaced at
        the next call)."""
        with self._lock:
            if self._closed:
                return None
            if self._child is None:
                self._child = self._start()
                self._answered = False
            child = self._child
            if child is None:
                return None
            # The child gives itself ``timeout + 1``: a margin above that, or a slow answer kills it.
            grace = 3.0 if self._answered else START_GRACE
            self._next_id += 1
            request = {"id": self._next_id, "group": group_id, "timeout": timeout}
            try:
                assert child.stdin is not None
                child.stdin.write(json.dumps(request).encode() + b"\n")
                child.stdin.flush()
            except OSError:
                self._ended("it could not be written to")
                return None
            answer = self._answer(self._next_id, time.monotonic() + timeout + grace)
            if answer is None:
                return None
            self._answered = True
            self._stillborn = 0
            if "error" in answer:
                self._log.debug("describing group %r failed: %s", group_id, answer["error"])
                return None
            fields: dict[str, Any] = answer["group"]
            return fields

    def stop(self, *, final: bool = False) -> None:
        """End the child at once, also while a describe waits on it (that describe answers None);
        a later describe starts another, unless ``final`` (the consumer closed)."""
        self._stopping = True
        if final:
            self._closed = True
        child = self._child
        if child is not None:
            child.kill()  # not under the lock: a describe may hold it, waiting on this child
        with self._lock:
            child, self._child, self._buffer = self._child, None, b""
            self._stopping = False
        if child is not None:
            _close(child)

    # -- the parent's side -------------------------------------------------------------------
    def _stillbirth(self, status: int | None) -> bool:
        """A child died before its first answer: True once that makes children unusable here
        (``BROKEN_AFTER`` in a row; logged once, as the explainer falls back to this process)."""
        self._stillborn += 1
        if self._stillborn < BROKEN_AFTER:
            return False
        if self._stillborn == BROKEN_AFTER:
            self._log.warning(
                "no describe process could be started here (%d died before answering, exit status %s): "
                "the rebalance explainer describes in this process from now on",
                self._stillborn,
                status,
            )
        return True

    def _start(self) -> subprocess.Popen[bytes] | None:
        if not self.usable:
            return None
        try:
            child = subprocess.Popen(
                [sys.executable, "-c", _BOOT, os.path.abspath(__file__)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError as exc:
            self._log.debug("no describe helper process: %s", exc)
            self._stillbirth(None)
            return None
        try:
            assert child.stdin is not None
            child.stdin.write(json.dumps(self._conf).encode() + b"\n")
            child.stdin.flush()
        except OSError as exc:
            self._log.debug("the describe helper process ended at once: %s", exc)
            self._stillbirth(_close(child))
            return None
        return child

    def _answer(self, wanted: int, deadline: float) -> dict[str, Any] | None:
        """The child's answer to request ``wanted``, relaying its log lines meanwhile."""
        assert self._child is not None and self._child.stdout is not None
        out = self._child.stdout
        poller = select.poll()
        poller.register(out.fileno(), select.POLLIN)
        while True:
            line = self._line()
            if line is not None:
                message = json.loads(line)
                if "log" in message:
                    self._log.log(int(message["log"]), "%s", message["text"])
                    continue
                if message.get("id") == wanted:
                    answer: dict[str, Any] = message
                    return answer
                continue  # a late answer to a request given up on
            left = deadline - time.monotonic()
            if left <= 0:
                self._ended("it did not answer in time")
                return None
            if not poller.poll(left * 1000):
                continue
            chunk = os.read(out.fileno(), 65536)
            if not chunk:
                self._ended("it exited")
                return None
            self._buffer += chunk

    def _line(self) -> bytes | None:
        end = self._buffer.find(b"\n")
        if end < 0:
            return None
        line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
        return line

    def _ended(self, why: str) -> None:
        child, self._child, self._buffer = self._child, None, b""
        if child is None:
            return
        status = _close(child)
        if self._stopping:
            self._log.debug("the describe process was stopped (%s)", why)
            return
        if not self._answered and self._stillbirth(status):
            return
        self._log.warning(
            "the group describer's helper process was given up (%s; exit status %s): this rebalance "
            "is not explained; the next one starts another",
            why,
            status,
        )


def _close(child: subprocess.Popen[bytes]) -> int | None:
    """Close the child's pipes and reap it (killed if it does not exit at once)."""
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        return child.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


# -- the child's side ---------------------------------------------------------------------------
def _child_main(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    from confluent_kafka.admin import AdminClient

    write_lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with write_lock:
            stdout.write(json.dumps(message).encode() + b"\n")
            stdout.flush()

    class Relay(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            send({"log": record.levelno, "text": record.getMessage()})

    relay = logging.getLogger("safeconsumer.describe-child")
    relay.propagate = False
    relay.setLevel(logging.DEBUG)
    relay.addHandler(Relay())
    first = stdin.readline()
    if not first:
        return
    conf = json.loads(first)
    conf["logger"] = relay
    admin = AdminClient(conf)
    for line in stdin:
        request = json.loads(line)
        answer: dict[str, Any]
        try:
            timeout = float(request["timeout"])
            future = admin.describe_consumer_groups([request["group"]], request_timeout=timeout)[request["group"]]
            answer = {"id": request["id"], "group": description_fields(future.result(timeout=timeout + 1))}
        except Exception as exc:  # noqa: BLE001 - the parent decides; it logs at DEBUG
            answer = {"id": request["id"], "error": f"{type(exc).__name__}: {exc}"}
        admin.poll(0)  # librdkafka's log lines wait on the client's queue until it is served
        send(answer)


if __name__ == "__main__":
    _child_main(sys.stdin.buffer, sys.stdout.buffer)
