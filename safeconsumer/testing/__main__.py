"""``python -m safeconsumer.testing``: run one broker in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading

from ._broker import start_broker
from ._errors import BrokerStartError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m safeconsumer.testing", description=__doc__)
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a broker setting override, e.g. --set group.max.size=2 (repeatable)",
    )
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with start_broker(overrides) as broker:
            print(broker.bootstrap_servers, flush=True)
            if broker.log_path:
                print(f"broker log: {broker.log_path}", file=sys.stderr, flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
    except BrokerStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
