"""What SafeShareConsumer asks of upstream's ``ShareConsumer`` beside the class it extends: the exact
error of a call implicit mode refuses (asked of an implicit-mode consumer that reaches no cluster),
the releases it is tested with, and weak references to a consumer for the callables it hands out."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from confluent_kafka import ShareConsumer

from ..base._clients import HELPER_LOG

logger = logging.getLogger("safeconsumer")

#: Upstream's config key for the acknowledgement mode.
MODE_KEY = "share.acknowledgement.mode"

_oracle: list[ShareConsumer] = []
_oracle_lock = threading.Lock()


def implicit_oracle() -> ShareConsumer:
    """An implicit-mode ``ShareConsumer`` that is never subscribed and reaches no cluster: asked
    what upstream answers a call implicit mode refuses (its exact exception)."""
    with _oracle_lock:
        if not _oracle:
            _oracle.append(
                ShareConsumer(
                    {
                        "group.id": "safeconsumer-implicit-oracle",
                        "bootstrap.servers": "127.0.0.1:1",
                        "reconnect.backoff.ms": 60000,
                        "reconnect.backoff.max.ms": 60000,
                        "logger": HELPER_LOG,
                    }
                )
            )
        return _oracle[0]


def weak_method(ref: weakref.ref[Any], name: str) -> Callable[..., Any]:
    """``name`` of the consumer ``ref`` points to, as an attribute of the consumer itself without a cycle."""

    def method(*args: Any, **kwargs: Any) -> Any:
        consumer = ref()
        if consumer is None:
            raise ReferenceError("the SafeShareConsumer is gone")
        return getattr(consumer, name)(*args, **kwargs)

    return method


def call(ref: weakref.ref[Any], method: str, *args: Any, default: Any = None) -> Any:
    """``method`` of the consumer ``ref`` points to, if it is still alive (else ``default``)."""
    consumer = ref()
    return default if consumer is None else getattr(consumer, method)(*args)


#: The confluent-kafka releases SafeShareConsumer is tested with (upstream's share consumer is a
#: Preview: its API may change in any release; the conformance suite catches it at the next upgrade).
TESTED_WITH = ("2.16",)

_said: list[bool] = []


def say_preview() -> None:
    """Once per process: upstream's share consumer is a Preview (librdkafka logs it through the
    application's client, which may print to stderr), and whether this release is one we test with."""
    if _said:
        return
    _said.append(True)
    from importlib.metadata import version

    installed = version("confluent-kafka")
    tested = installed.startswith(tuple(f"{v}." for v in TESTED_WITH))
    logger.log(
        logging.INFO if tested else logging.WARNING,
        "confluent-kafka's ShareConsumer is a Preview: its API may change in any release; SafeShareConsumer is "
        "tested with confluent-kafka %s (installed: %s)",
        ", ".join(f"{v}.x" for v in TESTED_WITH),
        installed,
    )
