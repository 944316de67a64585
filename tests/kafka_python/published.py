"""kafka-python's own consumer tests, as published on PyPI, run against our broker.

    python -m tests.kafka_python.published BOOTSTRAP {kafka-python|safeconsumer} [pytest args...]

:func:`prepare` downloads the source distribution of the kafka-python version installed here
(``pip download --no-binary``) into ``~/.cache/safeconsumer`` and unpacks its ``test/`` tree; nothing
of it enters this repository. The distribution leaves out two files its integration conftest needs:
``test/__init__.py`` (without it ``import test`` finds the standard library's package) and
``test/service.py`` (the broker processes it spawns). :func:`prepare` writes both: an empty package
marker and :data:`_SERVICE`, which only knows the external broker that ``KAFKA_URI`` names.

:func:`run` runs the consumer integration tests with kafka-python's consumer or, through the
:mod:`tests.kafka_python.swap` plugin, with ``safeconsumer.kafka_python.KafkaConsumer``, and returns
each test's outcome from the JUnit report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from pathlib import Path

from safeconsumer.testing._local import KAFKA_VERSION, cache_root

from ..support import run_suite

ROOT = Path(__file__).resolve().parents[2]

#: The consumer tests of kafka-python's distribution that this project runs.
TESTS = "test/integration/test_consumer_integration.py"

#: ``test/service.py`` for a run against an external broker only (written by prepare()).
_SERVICE = '''"""Written by safeconsumer's tests/kafka_python/published.py: the suite runs against KAFKA_URI."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def start(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run uses the external broker named by KAFKA_URI")
'''


def prepare() -> Path:
    """The unpacked test tree of the installed kafka-python's source distribution (cached)."""
    release = version("kafka-python")
    tree = cache_root() / f"kafka-python-{release}-tests"
    if (tree / TESTS).exists():
        return tree
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--dest",
                tmp,
                f"kafka-python=={release}",
            ],
            check=True,
        )
        [sdist] = Path(tmp).glob("kafka*python-*.tar.gz")
        staging = Path(tmp) / "tree"
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if "/test/" in m.name or m.name.endswith("/pyproject.toml")]
            archive.extractall(staging, members=members, filter="data")
        [top] = staging.iterdir()
        (top / "test" / "__init__.py").touch()
        (top / "test" / "service.py").write_text(_SERVICE)
        tree.parent.mkdir(parents=True, exist_ok=True)
        top.rename(tree)
    return tree


def run(bootstrap: str, consumer: str, junit: Path, *pytest_args: str, timeout: float = 900) -> dict[str, str]:
    """Run the published consumer tests against ``bootstrap`` with ``consumer`` ("kafka-python" or
    "safeconsumer"); each test's outcome ("passed", "failed", "skipped") by name."""
    tree = prepare()
    env = {
        **os.environ,
        "KAFKA_VERSION": KAFKA_VERSION,
        "KAFKA_URI": f"PLAINTEXT://{bootstrap}",
        "KAFKA_ROOT": str(tree),
        "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)]),
        "SAFECONSUMER_KAFKA_PYTHON_CONSUMER": consumer,
    }
    return run_suite(TESTS, "tests.kafka_python.swap", tree, env, junit, *pytest_args, timeout=timeout, qualified=False)


def main(argv: list[str]) -> int:
    bootstrap, consumer, *rest = argv
    with tempfile.TemporaryDirectory() as tmp:
        outcomes = run(bootstrap, consumer, Path(tmp) / "junit.xml", *rest)
    for name, outcome in sorted(outcomes.items()):
        print(f"{outcome:8} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
