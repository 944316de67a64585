"""When a poll's records were acquired: the earliest their locks can have started.

librdkafka's share consumer sends a fetch only from inside a poll, one at a time to one broker
(``test_raw_a_poll_that_returned_records_left_no_fetch_in_flight``), and the poll that returns
empty leaves one in flight (its last step sends it). The broker acquires what that fetch
finds as it answers, and the records wait in librdkafka's queue, their locks running, until the next
poll hands them out at once, however much later that comes (characterized:
``test_raw_records_a_fetch_left_in_flight_acquired_are_handed_out_past_their_locks``). A poll that
blocks long after its fetch was answered does the same inside one call. So the time a poll returns
is not when its records' locks started. What is known is when they cannot have started yet:

- a poll that returned records took the one response there was, and left nothing in flight, so the
  records of the next poll were acquired after that poll started;
- a poll that returned empty saw an empty queue as it ended: whatever comes next arrived after that;
- a poll that raised may have left a response queued behind its error: nothing is known of it, and
  the bound stays where it was.

:class:`Fetches` keeps that bound, and calls upstream's ``poll()`` in slices of :data:`SLICE` so
that a long ``poll(timeout)`` on a quiet topic does not count the whole wait against its batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: The longest one call of upstream's ``poll()`` lasts inside a longer ``poll(timeout)``: a batch is
#: taken to be at most this much older than it is (upstream polls in 200 ms slices itself).
SLICE = 0.5


class Fetches:
    """The earliest time the records of the next poll can have been acquired (see the module)."""

    __slots__ = ("floor",)

    def __init__(self) -> None:
        #: None: the next upstream call's own start.
        self.floor: float | None = None

    def poll(self, upstream: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
        """Upstream's ``poll(*args, **kwargs)``, as ``(messages, acquired)``: ``acquired`` is the
        earliest the returned records' locks can have started. A timeout longer than :data:`SLICE`
        (or none) is waited in slices; any other argument goes to upstream as it is (its errors)."""
        timeout: Any = None
        if len(args) == 1 and not kwargs:
            timeout = args[0]
        elif not args and set(kwargs) <= {"timeout"}:
            timeout = kwargs.get("timeout", -1)  # upstream's default: wait for records
        if type(timeout) not in (int, float) or 0 <= timeout <= SLICE:
            return self._call(upstream, args, kwargs)
        deadline = None if timeout < 0 else time.monotonic() + timeout
        while True:
            left = SLICE if deadline is None else min(SLICE, max(0.0, deadline - time.monotonic()))
            messages, acquired = self._call(upstream, (left,), {})
            # (no floor after a call: it returned records)
            if self.floor is None or (deadline is not None and time.monotonic() >= deadline):
                return messages, acquired

    def _call(self, upstream: Callable[..., Any], args: Any, kwargs: Any) -> tuple[Any, float]:
        start = time.monotonic()
        floor = self.floor
        try:
            messages = upstream(*args, **kwargs)
        except BaseException:
            self.floor = start if floor is None else floor
            raise
        if len(messages):
            self.floor = None
            return messages, start if floor is None else floor
        self.floor = time.monotonic()
        return messages, self.floor
