"""``python -m safeconsumer doctor|dead-letters ...`` (also the ``safeconsumer`` console script)."""

from __future__ import annotations

import sys

from .health.doctor import main


def console() -> None:
    """The ``safeconsumer`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    console()
