"""The suite's own scheduling: ``make test`` relies on ``--dist loadgroup`` sending every test of
one ``xdist_group`` to one worker (tests/conftest.py adds ``override-brokers`` to the tests that
start special brokers). pytest 9.2 with xdist 3.8 silently ignored the marks; this pins that the
installed pair honours them, both a module's mark and one a conftest adds at collection."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

CONFTEST = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if "added" in item.name:
            item.add_marker(pytest.mark.xdist_group("added"))
"""

TESTS = """
import os
import time

import pytest

def _where(name):
    with open(os.environ["WHERE"], "a") as f:
        f.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']}\\n")
    time.sleep(0.2)  # long enough for every worker to take work

@pytest.mark.xdist_group("static")
@pytest.mark.parametrize("n", range(4))
def test_static(n):
    _where("static")

@pytest.mark.parametrize("n", range(4))
def test_added(n):
    _where("added")

@pytest.mark.parametrize("n", range(8))
def test_free(n):
    _where("free")
"""


def test_loadgroup_sends_each_group_to_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_groups.py").write_text(textwrap.dedent(TESTS))
    where = tmp_path / "where.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadgroup"],
        cwd=tmp_path,
        env={**_env(), "WHERE": str(where)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [line.split() for line in where.read_text().splitlines()]
    workers = {group: {w for g, w in runs if g == group} for group in ("static", "added", "free")}
    assert len(runs) == 16
    assert len(workers["static"]) == 1, f"a module's xdist_group ran on {workers['static']}"
    assert len(workers["added"]) == 1, f"a conftest's xdist_group ran on {workers['added']}"
    assert len(workers["free"]) > 1, "the ungrouped tests did not spread: the check shows nothing"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
