"""Which ``await consume(...)`` calls the asyncio chunk lane may answer on the loop.

Only plain calls upstream would accept: anything else goes to the consumer underneath, which
answers (or refuses) exactly as upstream.
"""

from __future__ import annotations

from typing import Any

import pytest

from safeconsumer.aio import _count_of


@pytest.mark.parametrize(
    ("args", "kwargs", "n"),
    [
        ((), {}, 1),
        ((500,), {}, 500),
        ((500, 1.0), {}, 500),
        ((500, 0), {}, 500),
        ((500,), {"timeout": 0.5}, 500),
        ((), {"num_messages": 7, "timeout": -1}, 7),
        ((), {"timeout": 2.0}, 1),
        ((1_000_000, 1.0), {}, 1_000_000),
    ],
)
def test_plain_calls_get_their_count(args: tuple[Any, ...], kwargs: dict[str, Any], n: int) -> None:
    assert _count_of(args, kwargs) == n


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((0,), {}),  # upstream returns [] at once
        ((-1,), {}),  # upstream raises
        ((1_000_001,), {}),
        ((True,), {}),
        ((5.0,), {}),
        (("5",), {}),
        ((5, None), {}),
        ((5, "1"), {}),
        ((5, 1.0, 3), {}),
        ((5,), {"num_messages": 5}),  # given twice: upstream's TypeError
        ((), {"count": 5}),
        ((5,), {"timeout": None}),
    ],
)
def test_anything_else_goes_to_the_consumer(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    assert _count_of(args, kwargs) == 0
