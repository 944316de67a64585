"""The pytest plugin's ``kafka_versions`` mark and ``kafka_version`` fixture, in a pytest run of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = """
import pytest

@pytest.mark.kafka_versions
def test_each(kafka_version):
    print("\\nRAN", kafka_version)

@pytest.mark.kafka_versions("4.3.1")
def test_one(kafka_version):
    print("\\nRAN one", kafka_version)

def test_default(kafka_version):
    print("\\nRAN default", kafka_version)
"""


def _run(tmp_path: Path, source: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_suite.py").write_text(source)
    clean = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "KAFKA_HOME")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "safeconsumer.testing", "-p", "no:cacheprovider", "-s", "-q", "-rA"],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_marked_test_runs_once_per_release_and_an_unmarked_one_on_the_newest(tmp_path: Path) -> None:
    done = _run(tmp_path, SUITE)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = sorted(line for line in done.stdout.splitlines() if line.startswith("RAN"))
    assert ran == ["RAN 4.3.1", "RAN 4.4.0", "RAN default 4.4.0", "RAN one 4.3.1"], done.stdout


def test_with_one_cluster_the_other_release_s_tests_are_deselected(tmp_path: Path) -> None:
    done = _run(tmp_path, SUITE, KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", SAFECONSUMER_KAFKA_VERSION="4.3.1")
    assert done.returncode == 0, done.stdout + done.stderr
    ran = sorted(line for line in done.stdout.splitlines() if line.startswith("RAN"))
    assert ran == ["RAN 4.3.1", "RAN default 4.3.1", "RAN one 4.3.1"], done.stdout
    assert "1 deselected" in done.stdout


@pytest.mark.parametrize(
    ("source", "error"),
    [
        (
            "import pytest\n@pytest.mark.kafka_versions\ndef test_x():\n    pass\n",
            "marked kafka_versions, but none of its fixtures depends on kafka_version",
        ),
        (
            "import pytest\n@pytest.mark.kafka_versions('3.9.0')\ndef test_x(kafka_version):\n    pass\n",
            "supported releases are ('4.4.0', '4.3.1')",
        ),
    ],
)
def test_a_mark_that_cannot_apply_is_a_usage_error(tmp_path: Path, source: str, error: str) -> None:
    done = _run(tmp_path, source)
    assert done.returncode != 0 and error in done.stdout + done.stderr, done.stdout + done.stderr
