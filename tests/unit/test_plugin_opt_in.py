"""The pytest plugin is opt-in: installing safeconsumer changes nobody else's test runs.

A throwaway project (its own ``pytest.ini``, so none of this repository's configuration applies)
runs pytest in a child process, in the environment safeconsumer is installed in, with plugin
autoloading on. Without opting in it sees none of our fixtures and no report-header line; with
``-p safeconsumer.testing`` or ``pytest_plugins`` in its conftest it sees them (``--setup-plan``
resolves a test's fixtures without starting a broker).
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

FIXTURES = ("kafka_broker", "kafka_bootstrap", "kafka_broker_factory", "kafka")
HEADER = "safeconsumer.testing: Kafka broker source"

USES_A_FIXTURE = """
def test_wants_a_broker_address(kafka_bootstrap):
    assert kafka_bootstrap
"""


def _project(tmp_path: Path, *, conftest: str = "") -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (tmp_path / "test_app.py").write_text(USES_A_FIXTURE)
    if conftest:
        (tmp_path / "conftest.py").write_text(conftest)
    return tmp_path


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=project,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _fixtures_listed(out: str) -> set[str]:
    return {name for name in FIXTURES if any(line.startswith(f"{name} ") for line in out.splitlines())}


def test_no_entry_point_registers_the_plugin() -> None:
    # The installed distribution itself: its entry points are the ones pytest would load.
    dist = metadata.distribution("safeconsumer")
    assert {ep.group for ep in dist.entry_points} == {"console_scripts"}, dist.entry_points
    points = metadata.entry_points(group="pytest11")
    ours = [ep for ep in points if ep.value.startswith("safeconsumer")]
    assert not ours, f"safeconsumer registers a pytest11 entry point: {ours}"


def test_a_project_that_does_not_opt_in_sees_nothing_of_ours(tmp_path: Path) -> None:
    project = _project(tmp_path)
    listing = _pytest(project, "--fixtures")
    assert listing.returncode == 0, listing.stdout + listing.stderr
    assert not _fixtures_listed(listing.stdout), listing.stdout
    assert HEADER not in listing.stdout
    plan = _pytest(project, "--setup-plan")
    assert plan.returncode == 1, plan.stdout
    assert "fixture 'kafka_bootstrap' not found" in plan.stdout, plan.stdout


@pytest.mark.parametrize(
    ("how", "args", "conftest"),
    [
        ("-p", ("-p", "safeconsumer.testing"), ""),
        ("pytest_plugins", (), 'pytest_plugins = ["safeconsumer.testing"]\n'),
    ],
)
def test_a_project_that_opts_in_gets_the_fixtures_and_header(
    tmp_path: Path, how: str, args: tuple[str, ...], conftest: str
) -> None:
    project = _project(tmp_path, conftest=conftest)
    listing = _pytest(project, "--fixtures", *args)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    assert _fixtures_listed(listing.stdout) == set(FIXTURES), listing.stdout
    assert HEADER in listing.stdout, f"{how}: no report header"
    # The plan resolves the test's fixtures without starting a broker.
    plan = _pytest(project, "--setup-plan", *args)
    assert "fixture 'kafka_bootstrap' not found" not in plan.stdout, plan.stdout
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "SETUP    S kafka_broker" in plan.stdout, plan.stdout
