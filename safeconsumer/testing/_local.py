"""A single-node Apache Kafka broker (KRaft mode) run from its jars, on 127.0.0.1.

The jars come from ``KAFKA_HOME/libs`` when that is set, otherwise they are
resolved once from Maven Central with Maven into a per-version cache outside
the repository (``$SAFECONSUMER_CACHE`` or ``~/.cache/safeconsumer``) and
reused by every later run.

Every broker gets its own free ports and a fresh data directory. Its log is a
file (``Broker.log_path``) that survives the broker, so a failing test can
point to it. The JVM is stopped with SIGTERM, then SIGKILL; it is also killed
by the kernel when the process that started it dies (``PR_SET_PDEATHSIG``),
so an interrupted test run never leaves a broker behind.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import fcntl
import importlib.resources
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path

from ._errors import BrokerStartError
from ._secure import TlsFiles, add_listener, listener_settings, make_tls
from ._settings import BROKER_SETTINGS, broker_node_settings, broker_settings, node_settings

logger = logging.getLogger(__name__)

#: The Apache Kafka release the launcher runs unless told otherwise: the newest one.
KAFKA_VERSION = "4.4.0"

#: The Apache Kafka releases safeconsumer supports and tests against, newest first (brokers upgrade
#: before clients: both run side by side in the field).
KAFKA_VERSIONS = ("4.4.0", "4.3.1")

#: The shared table (kept under its old name for code that imported it from here).
BASE_SETTINGS = BROKER_SETTINGS

_JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:-UsePerfData", "-Djava.awt.headless=true")
_STARTED_MARKER = "Kafka Server started"
_PR_SET_PDEATHSIG = 1

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
"""


def cache_root() -> Path:
    """Where resolved broker jars are kept between runs."""
    explicit = os.environ.get("SAFECONSUMER_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "safeconsumer"


def kafka_lib_dir(version: str = KAFKA_VERSION) -> Path:
    """Return a directory holding every jar the broker needs, resolving it if needed."""
    home = os.environ.get("KAFKA_HOME")
    if home:
        libs = Path(home) / "libs"
        if not any(libs.glob("kafka_*.jar")):
            raise BrokerStartError(f"KAFKA_HOME={home!r} has no libs/kafka_*.jar: is it an Apache Kafka distribution?")
        return libs
    target = cache_root() / f"kafka-{version}"
    lib = target / "lib"
    done = target / ".complete"
    if done.exists():
        return lib
    target.mkdir(parents=True, exist_ok=True)
    # Several test processes may start at once: one resolves, the others wait.
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return lib
        _resolve_with_maven(version, target)
        done.write_text(version + "\n")
    return lib


def _resolve_with_maven(version: str, target: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerStartError(
            "cannot resolve the Kafka broker jars: Maven (mvn) is not on PATH. "
            "Install Maven, or set KAFKA_HOME to an Apache Kafka 4.x distribution, "
            "or set KAFKA_BOOTSTRAP_SERVERS to an existing cluster."
        )
    pom = target / "pom.xml"
    pom.write_bytes(importlib.resources.files(__package__).joinpath("broker-pom.xml").read_bytes())
    staging = target / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    logger.info("resolving Apache Kafka %s jars from Maven Central into %s", version, target)
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(pom),
        f"-Dkafka.version={version}",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
        "dependency:copy-dependencies",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if proc.returncode != 0 or not any(staging.glob("kafka_*.jar")):
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise BrokerStartError(f"Maven could not resolve Apache Kafka {version} (exit {proc.returncode}):\n{tail}")
    lib = target / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    staging.rename(lib)


def _cluster_id() -> str:
    """A random KRaft cluster id (base64 of a UUID) that does not start with '-', which the
    storage tool's argument parser would read as an option (Kafka's own Uuid avoids it too)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    # Runs between fork and exec: the kernel sends SIGKILL to the JVM when the
    # thread that started it exits, so no broker outlives an interrupted run.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerStartError("cannot start a local Kafka broker: no java on PATH (Java 17+ is needed)")
    return found


_live: weakref.WeakSet[LocalBroker] = weakref.WeakSet()
_live_lock = threading.Lock()


@atexit.register
def _stop_all() -> None:
    with _live_lock:
        brokers = list(_live)
    for broker in brokers:
        broker.stop()


class LocalBroker:
    """One KRaft node process: broker and controller, or (``joins``) a second broker of a cluster.

    Use through :func:`safeconsumer.testing.start_broker`.
    """

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        *,
        version: str = KAFKA_VERSION,
        startup_timeout: float = 120.0,
        joins: LocalBroker | None = None,
        node_id: int = 1,
        sasl_ssl: bool = False,
    ) -> None:
        """``joins``: run a broker-only node ``node_id`` of that (started) broker's cluster, whose
        controller stays the only one; without it, a single node that is broker and controller.
        ``sasl_ssl``: a SASL_SSL listener too (SCRAM-SHA-512 over TLS, see ``_secure``), which is
        then the one :attr:`bootstrap_servers` names."""
        if joins is not None and (joins.pid is None or node_id == 1):
            raise ValueError("a joining node needs a started first node and a node_id other than 1")
        if joins is not None and sasl_ssl:
            raise ValueError("a SASL_SSL listener is made for single-node brokers only")
        self.overrides = dict(overrides or {})
        self.joins = joins
        self.node_id = node_id
        #: The KRaft cluster id, once formatted.
        self.cluster_id: str = ""
        #: The controller's port (the joined node's for a broker-only node).
        self.controller_port = 0
        self.version = version
        self.startup_timeout = startup_timeout
        self.workdir = Path(tempfile.mkdtemp(prefix="safeconsumer-kafka-"))
        self.log_path = self.workdir / "broker.log"
        self.port: int = 0
        self.sasl_ssl = sasl_ssl
        #: The SASL_SSL listener's port (0 without one).
        self.secure_port: int = 0
        #: Its TLS material, once made.
        self.tls: TlsFiles | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def bootstrap_servers(self) -> str:
        """Where clients connect: the SASL_SSL listener on a secured broker."""
        return f"127.0.0.1:{self.secure_port if self.sasl_ssl else self.port}"

    @property
    def plaintext_bootstrap_servers(self) -> str:
        """The PLAINTEXT listener (the broker's own; on a secured broker, for managing users)."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        lib = kafka_lib_dir(self.version)
        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(lib)
                return
            except BrokerStartError:
                # A free port found by bind-and-close can be taken by another
                # process before the JVM binds it: retry on fresh ports.
                if attempt == attempts or "Address already in use" not in self._log_tail():
                    raise
                logger.warning("broker port was taken before the JVM bound it; retrying on new ports")

    def _start_once(self, lib: Path) -> None:
        self.port = _free_port()
        data = self.workdir / "data"
        shutil.rmtree(data, ignore_errors=True)
        if self.joins is None:
            self.controller_port = _free_port()
            self.cluster_id = _cluster_id()
            node = node_settings(
                listen="127.0.0.1",
                advertise="127.0.0.1",
                port=self.port,
                controller_port=self.controller_port,
                log_dirs=str(data),
                dynamic_quorum=True,
            )
            formatting = ["--standalone", "-t", self.cluster_id]
        else:
            self.controller_port, self.cluster_id = self.joins.controller_port, self.joins.cluster_id
            node = broker_node_settings(
                node_id=self.node_id, port=self.port, controller_port=self.controller_port, log_dirs=str(data)
            )
            formatting = ["-t", self.cluster_id]
        if self.sasl_ssl:
            self.secure_port = _free_port()
            self.tls = self.tls or make_tls(self.workdir / "tls")
            node = {**add_listener(node, self.secure_port), **listener_settings(self.secure_port, self.tls)}
        settings = broker_settings(node, self.overrides)
        props = self.workdir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        props.chmod(0o600)  # a secured broker's keystore password is in it
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=self.log_path))
        self.log_path.write_text("")
        java = self._java_command(lib)
        fmt = subprocess.run(
            [*java, "kafka.tools.StorageTool", "format", *formatting, "-c", str(props)],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if fmt.returncode != 0:
            raise BrokerStartError(f"formatting the KRaft log dir failed:\n{(fmt.stdout + fmt.stderr)[-3000:]}")
        self._launch(lib)

    def _java_command(self, lib: Path) -> list[str]:
        # SAFECONSUMER_BROKER_JVM_OPTS is appended (later options win), e.g. a larger heap for benchmarks.
        extra = os.environ.get("SAFECONSUMER_BROKER_JVM_OPTS", "").split()
        log4j = self.workdir / "log4j2.properties"
        return [_java(), *_JVM_OPTIONS, *extra, f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{lib}/*"]

    def start_again(self) -> None:
        """Start the JVM stopped by :meth:`stop_process` again, on the same ports and data."""
        if self._proc is not None:
            return
        self._launch(kafka_lib_dir(self.version), after=self._starts_logged())

    def _launch(self, lib: Path, *, after: int = 0) -> None:
        """Run the broker on the formatted data dir; return once it logged its start (``after``: once more)."""
        props = self.workdir / "server.properties"
        java = self._java_command(lib)
        out = open(self.workdir / "stdout.log", "ab")  # noqa: SIM115 - owned by the child
        started = time.monotonic()
        self._proc = subprocess.Popen(
            [*java, "kafka.Kafka", str(props)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl runs there, no locks taken
        )
        out.close()
        with _live_lock:
            _live.add(self)
        deadline = started + self.startup_timeout
        while True:
            if self._proc.poll() is not None:
                self._proc = None
                raise BrokerStartError(
                    f"the Kafka broker exited during start-up; log {self.log_path}:\n{self._log_tail()}"
                )
            if self._starts_logged() > after:
                break
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerStartError(
                    f"the Kafka broker did not start within {self.startup_timeout:.0f}s; log {self.log_path}:\n"
                    f"{self._log_tail()}"
                )
            time.sleep(0.1)
        logger.info(
            "Kafka %s started on %s in %.1fs (log %s)",
            self.version,
            self.bootstrap_servers,
            time.monotonic() - started,
            self.log_path,
        )

    def _starts_logged(self) -> int:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace").count(_STARTED_MARKER)
        return 0

    def _log_tail(self, size: int = 3000) -> str:
        text = ""
        for path in (self.log_path, self.workdir / "stdout.log"):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")[-size:]
        return text

    def stop(self) -> None:
        self.stop_process()
        # Keep the logs for post-mortems; the data can go.
        shutil.rmtree(self.workdir / "data", ignore_errors=True)

    def stop_process(self, *, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop the JVM, keeping its data and ports for :meth:`start_again`; ``sig=SIGKILL``: at
        once, as a crash does (no controlled shutdown)."""
        proc, self._proc = self._proc, None
        with _live_lock:
            _live.discard(self)
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
