"""The reader: the one path records take from librdkafka to the application.

``poll()``, ``consume()`` and the keepalive all read here. Records are read from librdkafka
a batch at a time (one C call per batch, not per record) into the partition table's
read-ahead, then handed out through the gate. A real call reaches librdkafka at least every
``real_call_every`` seconds, so its ``max.poll.interval.ms`` clock and rebalance callbacks
are served as if every ``poll()`` reached it.

``poll()`` also has a fast lane: a batch wholly deliverable when it arrived is handed out
one record per call without the lock (:meth:`SafeConsumer.poll` and ``SafeAIOConsumer.poll``
pop it; the deadline ``lane_until`` keeps real calls going). Every method here runs with the
consumer's lock held, except the keeper's idle clock (:meth:`Reader.idle_seconds`,
:meth:`Reader.touch`: one float, read and written whole).

Each ``poll()``/``consume()`` first marks the application as *come back*: what the previous
call handed out is processed, so its offsets may be stored (I8), and a due store happens
then, before anything new is handed out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from confluent_kafka import Message

from ..base._keys import READ_AHEAD, READ_AHEAD_BYTES, READ_CHUNK
from ._client import RawClient
from ._delivery import DeliveryGate
from ._partitions import PartitionTable
from ._stall import StallGuard

if TYPE_CHECKING:
    from ._rebalance import Rebalancer

_T = TypeVar("_T")

_monotonic = time.monotonic

#: Records up to this size are read READ_CHUNK at a time.
_SMALL_RECORD = READ_AHEAD_BYTES // READ_CHUNK


def _is_some(polled: object) -> bool:
    """A poll() returned something (not ``bool``: a record with an empty value has length 0)."""
    return polled is not None


def _rest(timeout: float, until: float, now: float) -> float:
    """What is left at ``now`` of a poll(``timeout``) due to end at ``until`` (< 0: for ever)."""
    return timeout if timeout < 0 else max(0.0, until - now)


class Reader:
    """Reads records from librdkafka and hands them out through the gate."""

    def __init__(
        self,
        client: RawClient,
        table: PartitionTable,
        gate: DeliveryGate,
        rebalancer: Rebalancer,
        stall: StallGuard,
        *,
        real_call_every: float,
    ):
        self._client = client
        self._table = table
        self._gate = gate
        self._rebalancer = rebalancer
        #: on_lost callbacks served by a read-ahead (the rebalancer's): they wait behind an error event.
        self._deferred = rebalancer.deferred
        self.real_call_every = real_call_every
        #: When the application's poll()/consume() last reached librdkafka (the keepalive's idle clock).
        self.last_call = _monotonic()
        #: Until when poll() may hand out lane records without a real call.
        self.lane_until = 0.0
        #: The ownership epoch under which the read-ahead was fetched (-1: unknown, check each record).
        self._ahead_epoch = -1
        #: The stall guard (I11), run on the application's calls when due; and when a read last found
        #: librdkafka's queue empty (the guard's proof that records were not merely queued).
        self._stall = stall
        self._stall_watch = stall.watch
        self.drained_at = 0.0
        #: How many records one read takes now: READ_CHUNK, fewer while records are large
        #: (READ_AHEAD_BYTES in all; judged by the first record of the last read-ahead).
        self._ahead_limit = READ_CHUNK

    def _come_back(self, now: float) -> None:
        table = self._table
        table.came_back()
        deferred = self._deferred
        if deferred.waiting:
            deferred.run_due(table.ahead)
        self._maintain(now)
        gate = self._gate
        if table.dirty and now - gate.last_flush >= gate.flush_interval:
            gate.flush()

    def poll(self, timeout: float) -> Message | None:
        """The checked path of poll(): one record, error event, or None.

        Called by the facade's poll() (lock held, app back, deferred errors raised). Changes the read-ahead, the
        lane and ``outstanding`` in the table, and the idle clock.
        """
        table, gate, client = self._table, self._gate, self._client
        now = _monotonic()
        self._come_back(now)
        ahead = table.ahead
        wait = timeout
        until = now + timeout if timeout > 0 else now  # timeout < 0: for ever
        while True:
            if table.maybe_releasable:
                # Withheld records of a resumed partition go first (also when a callback run by
                # the call below resumed it): what was read after them waits behind them.
                ready = gate.release(1)
                if ready:
                    table.handed_out(ready[0])
                    return ready[0]
            if ahead and now - self.last_call >= self.real_call_every:
                epoch = table.epoch
                batch, _ = self._read_ahead(self._more_ahead())
                now = self.last_call = _monotonic()
                ahead.extend(batch)  # a revocation it served may have emptied the read-ahead
                self._ahead_epoch = epoch if table.epoch == epoch else -1
            if ahead:
                msg = ahead.popleft()
                trusted = self._ahead_epoch == table.epoch
            else:
                epoch = table.epoch
                # The first event exactly as upstream's poll() takes it: callbacks queued
                # before it are served now, those queued behind it by the next call.
                polled = client.poll(0)
                if polled is None:
                    self.drained_at = now
                    if wait and not ahead:
                        polled = self._until_due(client.poll, wait, _is_some)
                now = self.last_call = _monotonic()
                if ahead:
                    # A rebalance served by that call gave back records read before it (eager
                    # limbo): they go first, what the call returned queues behind them.
                    if polled is not None:
                        ahead.append(polled)
                    self._ahead_epoch = -1
                    continue
                if polled is None:
                    if not table.maybe_releasable:
                        return None
                    wait = 0  # a callback it ran resumed withheld records: they are ready now
                    continue
                msg = polled
                if msg.error() is None:
                    # librdkafka's position is already past ``msg``: it waits in the read-ahead while
                    # more is read, so that a rebalance those reads serve sees it (no offset is
                    # stored past it, and an eager revocation keeps it in limbo).
                    ahead.append(msg)
                    errors = self._read_lane(len(msg), epoch)
                    now = self.last_call = _monotonic()
                    # Read while the assignment stood still: no record of it can be unowned.
                    unchanged = table.epoch == epoch
                    if unchanged and not errors and len(ahead) > 1:
                        batch = [*ahead]
                        ahead.clear()
                        first = gate.fill_lane(batch, unchanged=True, errors=False)
                        if first is not None:
                            self.lane_until = now + self.real_call_every
                            return first
                        ahead.extend(batch)
                    self._ahead_epoch = epoch if unchanged else -1
                    if not ahead:
                        # A revocation those reads served took it: wait for the rest of the timeout.
                        wait = _rest(timeout, until, now)
                        continue
                    msg = ahead.popleft()
                trusted = table.epoch == epoch
            if trusted and not table.paused and not table.maybe_releasable:
                out = gate.admit_trusted(msg)
            else:
                out = gate.admit(msg)
            if out is not None:
                table.handed_out(out)
                if out is self._deferred.behind:
                    self._deferred.went_out((out,))
                return out
            # Withheld or dropped: keep serving the caller for the rest of its timeout, as upstream's
            # poll() waits for a record it may return.
            now = _monotonic()
            wait = _rest(timeout, until, now)

    def consume(self, num_messages: int, timeout: float, *, available: bool = False) -> list[Message]:
        """consume(): withheld records released first, then read-ahead, then new records.

        Every record is admitted *after* the last librdkafka call of this consume(): a call
        may serve a rebalance, and a record admitted before it could belong to a partition
        revoked by it (I2). ``available``: return as soon as there are records, as
        kafka-python's ``poll()`` does, instead of waiting up to ``timeout`` for
        ``num_messages`` of them (see :meth:`_read_available`).

        Called by the facade's consume() (lock held, app back, deferred errors raised). Changes the read-ahead
        and ``outstanding`` in the table, and the idle clock.
        """
        table = self._table
        now = _monotonic()
        self._come_back(now)
        if table.maybe_releasable or table.ahead:
            out = self._consume_waiting(num_messages, now)
            if out:
                table.handed_out(out)
                deferred = self._deferred
                if deferred.went_out(out) and len(out) < num_messages:
                    # upstream's consume() goes on serving after it, while there is room
                    deferred.run_due(table.ahead)
                return out
        epoch = table.epoch
        due = self._next_due()
        if available and timeout:
            msgs, errors = self._read_available(num_messages, timeout)
        elif due and (timeout < 0 or _monotonic() + timeout >= due):
            msgs, errors = self._until_due(
                lambda t: self._client.consume(num_messages, t), timeout, lambda result: result[0]
            )
        else:
            msgs, errors = self._client.consume(num_messages, timeout)
        self.last_call = _monotonic()
        if len(msgs) < num_messages:
            self.drained_at = self.last_call
        if table.ahead or table.maybe_releasable:
            # A rebalance served by that call gave back records read before it (eager limbo), or
            # one of its callbacks resumed a partition with withheld records: those go first,
            # what the call returned queues behind them.
            table.ahead.extend(msgs)
            self._ahead_epoch = -1
            out = self._gate.release(num_messages)
            take = [table.ahead.popleft() for _ in range(min(num_messages - len(out), len(table.ahead)))]
            out += self._gate.admit_batch(take)
            if out:
                table.handed_out(out)
            return out
        if not msgs:
            return msgs
        out = self._gate.admit_batch(msgs, unchanged=epoch == table.epoch, errors=errors)
        if out:
            table.handed_out(out)
        return out

    def _read_lane(self, size: int, epoch: int) -> bool:
        """poll()'s read-ahead behind a first record of ``size`` bytes (already in the read-ahead):
        chunks of up to READ_CHUNK records while librdkafka has them, up to READ_AHEAD records,
        until the values read reach READ_AHEAD_BYTES (a chunk takes fewer records when the last
        ones were large), an error event or a change of the assignment. One locked poll() then
        serves many lane records; the memory read ahead stays within READ_AHEAD_BYTES plus one
        chunk. Each chunk joins the read-ahead as it arrives, so that a rebalance served by the
        next read sees it. Whether an error event was read."""
        ahead = self._table.ahead
        table, read = self._table, self._read_ahead
        total, taken = size, 1
        room = READ_CHUNK - 1 if size <= _SMALL_RECORD else READ_AHEAD_BYTES // size - 1
        self._ahead_limit = max(room + 1, 1)
        while room > 0:
            chunk, errors = read(room)
            ahead.extend(chunk)
            if errors or len(chunk) < room or table.epoch != epoch:
                return errors
            chunk_bytes = sum(map(len, chunk))
            total += chunk_bytes
            taken += room
            room = min(READ_CHUNK, READ_AHEAD - taken, (READ_AHEAD_BYTES - total) // (chunk_bytes // room or 1))
        return False

    def _read_available(self, num_messages: int, timeout: float) -> tuple[list[Message], bool]:
        """What librdkafka has now, up to ``num_messages``; when it has nothing, the first event
        within ``timeout`` and what else it has then. librdkafka's consume() waits for all
        ``num_messages`` or the whole timeout; one read here is still one call of the application."""
        client = self._client
        msgs, errors = client.consume(num_messages, 0)
        if msgs:
            return msgs, errors
        first = self._until_due(client.poll, timeout, _is_some)
        if first is None or num_messages <= 1:
            return ([] if first is None else [first]), first is not None and first.error() is not None
        # librdkafka's position is already past ``first``: it waits in the read-ahead while the rest
        # is read, so that a rebalance that read serves sees it (see poll()); consume() takes it
        # from there, first.
        self._table.ahead.append(first)
        self._ahead_epoch = -1
        return client.consume(num_messages - 1, 0)

    def _maintain(self, now: float) -> None:
        """What falls due on the application's calls: re-assigning partitions whose committed
        offset librdkafka gave up fetching (see _requery), a subscription waiting to join (see
        _migration), and the stall guard (see _stall)."""
        rebalancer = self._rebalancer
        due = rebalancer.requery.due
        if due and now >= due:
            rebalancer.requery_due()
        joining = rebalancer.joining
        if joining is not None and joining.due and now >= joining.due:
            rebalancer.join_due(now)
        if now >= self._stall_watch.due and self._table.owned:
            self._stall.check(now, self.drained_at)

    def _next_due(self) -> float:
        """When :meth:`_maintain` next has work (0: none while nothing is owned or waits)."""
        rebalancer = self._rebalancer
        due = rebalancer.requery.due
        stall = self._stall_watch.due if self._table.owned else 0.0
        if stall and (not due or stall < due):
            due = stall
        joining = rebalancer.joining
        if joining is not None and joining.due and (not due or joining.due < due):
            due = joining.due
        return due

    def _until_due(self, call: Callable[[float], _T], timeout: float, got_some: Callable[[_T], object]) -> _T:
        """``call(timeout)`` on librdkafka, cut short when :meth:`_maintain` falls due meanwhile:
        that runs, then the call goes on for the rest of ``timeout`` (< 0: for ever) until
        ``got_some`` of what it returns."""
        due = self._next_due()
        if not due or (timeout >= 0 and _monotonic() + timeout < due):
            return call(timeout)
        deadline = None if timeout < 0 else _monotonic() + timeout
        while True:
            now = _monotonic()
            self._maintain(now)
            step = -1.0 if deadline is None else max(0.0, deadline - now)
            due = self._next_due()
            if due:
                until_due = max(0.0, due - now)
                step = until_due if step < 0 else min(step, until_due)
            got = call(step)
            if got_some(got) or (deadline is not None and _monotonic() >= deadline):
                return got

    def _consume_waiting(self, num_messages: int, now: float) -> list[Message]:
        """consume() while records wait in the table: they go first, new ones queue behind them.

        librdkafka is still called (without waiting) when the read-ahead cannot fill the
        request or a real call is due, so its max.poll.interval.ms clock and rebalances are
        served; what it returns joins the read-ahead.
        """
        table, gate = self._table, self._gate
        ahead = table.ahead
        want = num_messages - len(ahead)
        if want <= 0 and now - self.last_call >= self.real_call_every:
            want = 1
        if want > 0:
            batch, _ = self._read_ahead(want)
            self.last_call = _monotonic()
            if batch:
                ahead.extend(batch)
                self._ahead_epoch = -1
        out = gate.release(num_messages)
        if ahead and len(out) < num_messages:
            take = [ahead.popleft() for _ in range(min(num_messages - len(out), len(ahead)))]
            out += gate.admit_batch(take)
        return out

    def _read_ahead(self, num_messages: int) -> tuple[list[Message], bool]:
        """A read whose results wait in the table: ``consume(num_messages, 0)``.

        librdkafka serves every callback queued among the events it returns, so an error
        event and the loss it announces (``_MAX_POLL_EXCEEDED``, then the lost partitions)
        are both served by this one call; upstream's poll() returns the error first and runs
        ``on_lost`` in the next call. So the read goes through :class:`._deferred.DeferredOnLost`,
        where the application's ``on_lost`` waits behind the last error event read here.
        """
        batch, errors = self._deferred.read_ahead(self._client.consume, num_messages)
        if len(batch) < num_messages:
            self.drained_at = _monotonic()
        return batch, errors

    def keep_alive(self) -> None:
        """One real call for the keepalive: serves rebalances and counts as alive for librdkafka.

        Nothing is handed out: what it returns waits in the read-ahead, in order (error events
        included), for the application's next call. Parking paused every partition inside
        librdkafka, so that is little.

        Called by the keeper's link (KeepaliveLink.keep_alive, lock held) on the keeper thread. Changes the
        table's read-ahead only (and joins, when a subscription waited and its gate opened: a member
        subscribed before a long keepalive block joins as upstream's does, without a poll).
        """
        joining = self._rebalancer.joining
        if joining is not None and joining.due:
            self._rebalancer.join_due(_monotonic())
        batch, _ = self._read_ahead(self._more_ahead())
        if batch:
            self._table.ahead.extend(batch)
            self._ahead_epoch = -1

    def _more_ahead(self) -> int:
        """How many records a real call made while records wait reads: a chunk, but never past
        READ_AHEAD waiting in all (an application slower than a chunk per ``real_call_every`` would
        otherwise grow the read-ahead without end); at least 1, since it must reach librdkafka."""
        return max(1, min(self._ahead_limit, READ_AHEAD - len(self._table.ahead)))

    def give_back(self, msgs: list[Message]) -> None:
        """Called by :class:`._lifecycle.AsyncLink` (lock held): what a poll()/consume() returned
        never reached the application; the table takes it back, to hand it out again first, and
        the read-ahead's ownership is checked record by record again."""
        self._table.given_back(msgs)
        self._ahead_epoch = -1

    def give_back_from(self, msg: Message) -> None:
        """Called by the poison handler (lock held): ``msg`` and what was handed out after it go back
        (see :meth:`._partitions.PartitionTable.give_back_from`)."""
        self._table.give_back_from(msg)
        self._ahead_epoch = -1

    def idle_seconds(self) -> float:
        return _monotonic() - self.last_call

    def touch(self) -> None:
        """The application is active now (the keepalive's idle clock restarts).

        Called by the keeper's link when the application comes back or leaves a keepalive block. Changes
        ``last_call``.
        """
        self.last_call = _monotonic()
