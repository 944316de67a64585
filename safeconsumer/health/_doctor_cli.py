"""The ``safeconsumer`` console script's parser, with the ``doctor`` command's arguments and config file."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from . import dead_letters
from ._cli import add_config_option
from ._report import DEFAULT_BUDGET


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="safeconsumer", description="safeconsumer's command line tools.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    doctor = commands.add_parser(
        "doctor",
        help="describe a live consumer or share group and flag what causes incidents",
        description="Describe a live consumer or share group and flag what causes incidents. "
        "Exit status: 0 healthy, 1 findings, 2 cannot connect.",
    )
    doctor.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT")
    doctor.add_argument("--group", required=True, help="the consumer group id")
    doctor.add_argument("--json", action="store_true", help="print one JSON object (see docs/group-health.md)")
    add_config_option(
        doctor,
        "a librdkafka setting, as kcat's -X: for the connection (security, ...) and as part of the "
        "members' consumer config (fetch settings)",
    )
    doctor.add_argument(
        "--consumer-config",
        type=argparse.FileType("r"),
        metavar="FILE",
        help="the members' consumer config, librdkafka properties (key=value lines, # comments); "
        "-X settings override it",
    )
    doctor.add_argument(
        "--consumers-per-process",
        type=_positive_int,
        default=1,
        metavar="N",
        help="how many consumers of this group one process runs (fetch memory; default 1)",
    )
    doctor.add_argument(
        "--fetch-memory-budget",
        type=_size,
        default=DEFAULT_BUDGET,
        metavar="BYTES",
        help="memory one process may spend on fetch buffers: bytes, or with KiB/MiB/GiB (default 1GiB)",
    )
    doctor.add_argument(
        "--observe",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="watch the group's membership this long first (static membership finding; default 0: not watched)",
    )
    doctor.add_argument(
        "--migrate",
        action="store_true",
        help="check moving the group to group.protocol=consumer (KIP-848): the brokers' support and policy, "
        "the consumer config's classic-only keys (give the config the members run with today), and whether "
        "the broker can convert the group",
    )
    doctor.add_argument(
        "--processing-time",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="share groups: the longest one record's processing takes, judged against the group's lock "
        "(lock_too_short, batch_outlives_lock)",
    )
    doctor.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")
    dead_letters.add_command(commands)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}


def _size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS or int(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size such as 512MiB or 1073741824, got {text!r}")
    return int(match.group(1)) * _UNITS[unit]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"expected 0 to 3600 seconds, got {text!r}")
    return value


def read_properties(lines: Sequence[str], source: str) -> dict[str, str]:
    """librdkafka-style properties: ``key=value`` lines; blank lines and ``#`` comments skipped."""
    out: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{source}:{number}: expected key=value, got {text!r}")
        out[key.strip()] = value.strip()
    return out
