"""What the ``safeconsumer`` console script's commands share (``doctor``, ``dead-letters``)."""

from __future__ import annotations

import argparse

__all__ = ["add_config_option", "config_pair"]


def config_pair(text: str) -> tuple[str, str]:
    """A ``-X KEY=VALUE`` argument (a librdkafka setting, as kcat's ``-X``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def add_config_option(parser: argparse.ArgumentParser, help: str) -> None:
    """The repeatable ``-X KEY=VALUE`` option (into ``config``, a list of pairs)."""
    parser.add_argument(
        "-X", dest="config", action="append", type=config_pair, default=[], metavar="KEY=VALUE", help=help
    )
