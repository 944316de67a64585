"""confluent-kafka-python's own share consumer tests run against our broker, with upstream's classes
and with ours (S1: ours pass wherever upstream's pass).

    python -m tests.confluent_share.published [--source SRC] [--broker BOOTSTRAP] [pytest args...]

Those tests are not in the package's source distribution on PyPI, so :func:`prepare` takes them from
confluent-kafka-python's repository: ``SRC`` (or ``SAFECONSUMER_CONFLUENT_SOURCE``) names a checkout
or a bare git directory; without one it clones the tag of the installed release from GitHub. Only
the ``tests/`` tree is kept, in ``~/.cache/safeconsumer``; nothing of it enters this repository.

Upstream's suite does ``from tests.common import ...``, a package name this repository uses too, so
the swap is a plugin module written into the unpacked tree (:data:`_SWAP`), not one of ours: with
``SAFECONSUMER_SHARE_CONSUMER=safeconsumer`` it replaces ``confluent_kafka.ShareConsumer`` and
``DeserializingShareConsumer`` by ours before the suite's helpers subclass them. The suite runs in
BYO mode (``BROKERS``) against the broker given, or one this module starts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from safeconsumer.testing._local import cache_root

from ..support import run_suite

#: The share consumer tests of upstream's repository that this project runs.
TESTS = "tests/integration/share_consumer"

REPOSITORY = "https://github.com/confluentinc/confluent-kafka-python"

_SWAP = '''"""Written by safeconsumer's tests/confluent_share/published.py: the share consumers become ours."""

import os

if os.environ.get("SAFECONSUMER_SHARE_CONSUMER") == "safeconsumer":
    import confluent_kafka

    from safeconsumer import SafeDeserializingShareConsumer, SafeShareConsumer

    confluent_kafka.ShareConsumer = SafeShareConsumer
    confluent_kafka.DeserializingShareConsumer = SafeDeserializingShareConsumer
'''


def prepare(source: str | None = None) -> Path:
    """The ``tests/`` tree of confluent-kafka-python (cached per source)."""
    source = source or os.environ.get("SAFECONSUMER_CONFLUENT_SOURCE")
    label = f"{version('confluent-kafka')}-{'git' if source is None else Path(source).name}"
    tree = cache_root() / f"confluent-kafka-python-{label}-tests"
    if (tree / TESTS).exists():
        (tree / "safeconsumer_swap.py").write_text(_SWAP)
        return tree
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / "tree"
        staging.mkdir()
        if source is None:
            checkout = Path(tmp) / "checkout"
            tag = f"v{version('confluent-kafka')}"
            clone = ["git", "clone", "--quiet", "--depth", "1", "--branch", tag, REPOSITORY, str(checkout)]
            subprocess.run(clone, check=True)
            shutil.copytree(checkout / "tests", staging / "tests")
        elif (Path(source) / "tests").is_dir():
            shutil.copytree(Path(source) / "tests", staging / "tests")
        else:  # a git directory: its HEAD's tests/
            archive = subprocess.run(
                ["git", "--git-dir", source, "archive", "HEAD", "tests"], check=True, stdout=subprocess.PIPE
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(staging)], input=archive, check=True)
        (staging / "safeconsumer_swap.py").write_text(_SWAP)
        tree.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(tree)
    return tree


def run(
    tree: Path, bootstrap: str, consumer: str, junit: Path, *pytest_args: str, timeout: float = 1800
) -> dict[str, str]:
    """Run upstream's share consumer tests with ``consumer`` ("confluent-kafka" or "safeconsumer");
    each test's outcome ("passed", "failed", "skipped") by its node name."""
    env = {
        **os.environ,
        "BROKERS": bootstrap,
        "PYTHONPATH": str(tree),
        "SAFECONSUMER_SHARE_CONSUMER": consumer,
    }
    return run_suite(TESTS, "safeconsumer_swap", tree, env, junit, *pytest_args, timeout=timeout, qualified=True)


def compare(upstream: dict[str, str], ours: dict[str, str]) -> list[str]:
    """The tests that passed with upstream's classes and did not with ours."""
    return sorted(name for name, outcome in upstream.items() if outcome == "passed" and ours.get(name) != "passed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="a checkout or git directory of confluent-kafka-python")
    parser.add_argument("--broker", help="a bootstrap address (default: a broker started here)")
    args, pytest_args = parser.parse_known_args(argv)
    tree = prepare(args.source)
    kinds = ("confluent-kafka", "safeconsumer")
    with tempfile.TemporaryDirectory() as tmp:
        if args.broker:
            got = {c: run(tree, args.broker, c, Path(tmp) / f"{c}.xml", *pytest_args) for c in kinds}
        else:
            from safeconsumer.testing import start_broker

            with start_broker() as broker:
                got = {c: run(tree, broker.bootstrap_servers, c, Path(tmp) / f"{c}.xml", *pytest_args) for c in kinds}
    upstream, ours = got["confluent-kafka"], got["safeconsumer"]
    for label, outcomes in (("upstream's classes", upstream), ("ours", ours)):
        counts = {k: sum(1 for o in outcomes.values() if o == k) for k in ("passed", "failed", "skipped")}
        print(f"{label}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    for name in sorted(n for n, o in upstream.items() if o != "passed"):
        print(f"  {upstream[name]} with upstream's classes too: {name} (ours: {ours.get(name)})")
    regressions = compare(upstream, ours)
    for name in regressions:
        print(f"  REGRESSION: passes with upstream's classes, {ours.get(name, 'missing')} with ours: {name}")
    if not upstream:
        print("no test ran")
        return 1
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
