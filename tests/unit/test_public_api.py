"""The public surface: a sorted, complete __all__, and a true drop-in signature set."""

from __future__ import annotations

import inspect

import confluent_kafka

import safeconsumer
import safeconsumer.testing
from safeconsumer import SafeConsumer

CONSUMER_METHODS = sorted(
    name for name in dir(confluent_kafka.Consumer) if not name.startswith("_") or name in ("__enter__", "__exit__")
)


def test_all_is_sorted_and_complete() -> None:
    for module in (safeconsumer, safeconsumer.testing):
        names = [n for n in module.__all__ if n != "__version__"]
        assert names == sorted(names), f"{module.__name__}.__all__ is not sorted"
        public = {
            n
            for n, v in vars(module).items()
            if not n.startswith("_")
            and not inspect.ismodule(v)
            and getattr(v, "__module__", "").startswith(module.__name__)
        }
        assert public <= set(module.__all__), (
            f"{module.__name__} exports {public - set(module.__all__)} outside __all__"
        )


def test_subclasses_the_consumer() -> None:
    assert issubclass(SafeConsumer, confluent_kafka.Consumer)


def test_every_consumer_method_is_overridden_with_its_parameters() -> None:
    # Each method is wrapped (so state checks and the lock apply), keeping the names of
    # confluent_kafka's parameters, in order, so keyword calls keep working.
    expected = {
        "assign": ["partitions"],
        "assignment": [],
        "close": [],
        "cluster_id": ["timeout"],
        "commit": ["message", "offsets", "asynchronous"],
        "committed": ["partitions", "timeout"],
        "consume": ["num_messages", "timeout"],
        "consumer_group_metadata": [],
        "get_watermark_offsets": ["partition", "timeout", "cached"],
        "incremental_assign": ["partitions"],
        "incremental_unassign": ["partitions"],
        "list_topics": ["topic", "timeout"],
        "memberid": [],
        "offsets_for_times": ["partitions", "timeout"],
        "pause": ["partitions"],
        "poll": ["timeout"],
        "position": ["partitions"],
        "resume": ["partitions"],
        "seek": ["partition"],
        "set_sasl_credentials": ["username", "password"],
        "store_offsets": ["message", "offsets"],
        "subscribe": ["topics", "on_assign", "on_revoke", "on_lost"],
        "unassign": [],
        "unsubscribe": [],
        "__enter__": [],
        "__exit__": ["exc_type", "exc_value", "traceback"],
    }
    assert set(CONSUMER_METHODS) <= set(expected), (
        f"new Consumer methods to wrap: {set(CONSUMER_METHODS) - set(expected)}"
    )
    for name in CONSUMER_METHODS:
        method = getattr(SafeConsumer, name)
        assert "SafeConsumer" in method.__qualname__, f"{name} is not wrapped"
        params = [p for p in inspect.signature(method).parameters if p != "self"]
        assert params == expected[name], f"{name}{params}"
