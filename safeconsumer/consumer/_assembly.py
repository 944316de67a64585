"""How a SafeConsumer's parts are built and wired: who may tell whom what.

The facade (:mod:`._consumer`) has :func:`judge` judge the config and its options, creates the
underlying client, then calls :func:`assemble` once. The wiring, read top to bottom:

- the client boundary (:class:`._client.RawClient`) reports a fatal error to the lifecycle
  (``Lifecycle.fail``), every error code to the rebalance explainer, and a given-up
  committed-offset fetch to the rebalancer;
- the rebalancer asks the lifecycle whether the consumer is closing, and tells the fetch-memory
  share how many partitions it owns after every change;
- the reader reads through the client into the table, hands out through the gate, and asks the
  rebalancer to serve deferred ``on_lost`` callbacks and due re-queries;
- the keeper reaches the consumer only through a :class:`._lifecycle.KeepaliveLink`;
- the lifecycle is given every part it closes or stops (``Lifecycle.bind``).

Nothing here runs after construction except the closures it hands out: the explainer's
``owned`` count (read on the explainer's thread) and the rebalancer's fetch-memory report.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException

from ..base._clients import admin_config
from ..base._errors import FatalPolicy
from ..group._describe import GroupDescriber
from ..group._explainer import RebalanceExplainer
from ..group._memory import ConsumerBudget, parse_budget
from ..poison._policy import DeadLetterWriter, PoisonHandler, PoisonPolicy, check_policy
from ..poison._retries import PartitionBounds
from ._auth import AuthWatch, ErrorTap
from ._client import RawClient
from ._delivery import DeliveryGate
from ._join_gate import MIGRATION_TIMEOUT, JoinGate
from ._keepalive import KeepaliveMode, Keeper
from ._lifecycle import KeepaliveLink, Lifecycle, State
from ._offsets import Offsets
from ._partitions import PartitionTable
from ._pause import PauseLedger
from ._reader import Reader
from ._rebalance import Rebalancer
from ._retry import CommitRetry
from ._stall import StallGuard, stall_bound
from ._upstream import auto_store_setting, config_of, is_incremental, positive, protocol_label

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
from ..base._telemetry import LazyTelemetry


@dataclass(frozen=True)
class Parts:
    """A consumer's parts, each owning one responsibility (see docs/architecture.md)."""

    lock: threading.RLock
    life: Lifecycle
    ledger: PauseLedger
    table: PartitionTable
    client: RawClient
    gate: DeliveryGate
    telemetry: LazyTelemetry
    explainer: RebalanceExplainer
    rebalancer: Rebalancer
    reader: Reader
    offsets: Offsets
    keeper: Keeper
    poison: PoisonHandler


@dataclass(frozen=True)
class Settings:
    """The config librdkafka is given and SafeConsumer's keyword options, judged (see :func:`judge`)."""

    config: dict[str, Any]
    auto_store: bool
    budget: int | None
    keepalive: KeepaliveMode
    keepalive_after: float | None
    keepalive_max: float | None
    on_fatal: FatalPolicy
    commit_retry: CommitRetry | None
    meter_provider: MeterProvider | None
    tracer_provider: TracerProvider | None
    explain_rebalances: bool
    error_tap: ErrorTap | None
    auth_failure_timeout: float | None
    poison: PoisonPolicy
    migration_timeout: float | None = MIGRATION_TIMEOUT


def judge(
    conf: object,
    more: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    keepalive: KeepaliveMode,
    keepalive_after: float | None,
    keepalive_max: float | None,
    on_fatal: FatalPolicy,
    commit_retry: CommitRetry | None,
    meter_provider: MeterProvider | None,
    tracer_provider: TracerProvider | None,
    explain_rebalances: bool,
    fetch_memory_budget: int | None,
    auth_failure_timeout: float | None,
    poison: object,
    migration_timeout: float | None = MIGRATION_TIMEOUT,
) -> Settings:
    """Called by ``SafeConsumer.__init__`` before the client is created: the config judged as
    confluent_kafka and librdkafka judge it, then the options, in this order. The config
    returned has ``enable.auto.offset.store`` false: the gate stores offsets itself, once
    records are processed (see _delivery); ``auto_store`` is the application's setting.
    Its ``error_cb`` is an :class:`._auth.ErrorTap` in front of the application's own (one that is
    not callable is left for upstream to refuse)."""
    config = config_of(conf, more, kwargs)
    budget = check_options(keepalive, on_fatal, explain_rebalances, fetch_memory_budget, commit_retry)
    positive("keepalive_after", keepalive_after, 1.0)
    positive("keepalive_max", keepalive_max, 1.0)
    if auth_failure_timeout is not None:
        positive("auth_failure_timeout", auth_failure_timeout, 1.0)
    if migration_timeout:  # 0: join at once, as upstream
        positive("migration_timeout", migration_timeout, 1.0)
    auto_store = auto_store_setting(config)
    config["enable.auto.offset.store"] = False
    tap = None
    app_callback = config.get("error_cb")
    if app_callback is None or callable(app_callback):
        tap = config["error_cb"] = ErrorTap(app_callback)
    return Settings(
        config,
        auto_store,
        budget,
        keepalive,
        keepalive_after,
        keepalive_max,
        on_fatal,
        commit_retry,
        meter_provider,
        tracer_provider,
        explain_rebalances,
        tap,
        auth_failure_timeout,
        check_policy(poison),
        migration_timeout,
    )


def check_options(
    keepalive: object, on_fatal: object, explain_rebalances: object, fetch_memory_budget: object, commit_retry: object
) -> int | None:
    """SafeConsumer's keyword options, judged in this order before the client is created; returns
    the fetch-memory budget in bytes (None: no budget)."""
    if keepalive not in ("auto", "off"):
        raise ValueError(f"keepalive must be 'auto' or 'off', got {keepalive!r}")
    if on_fatal not in ("raise", "exit"):
        raise ValueError(f"on_fatal must be 'raise' or 'exit', got {on_fatal!r}")
    if not isinstance(explain_rebalances, bool):
        raise TypeError(f"explain_rebalances must be a bool, got {type(explain_rebalances).__name__}")
    budget = parse_budget(fetch_memory_budget)
    if commit_retry is not None and not isinstance(commit_retry, CommitRetry):
        raise TypeError(f"commit_retry must be a CommitRetry or None, got {type(commit_retry).__name__}")
    return budget


def assemble(consumer: Consumer, settings: Settings) -> Parts:
    """Called once by ``SafeConsumer.__init__``, after the client was created with
    ``settings.config``: build and wire the parts of ``consumer``, and count it in the process's
    fetch memory. Raises ``ValueError`` (the client closed) if it alone exceeds its budget."""
    config = settings.config
    group_id = str(config.get("group.id", ""))
    try:
        budget = ConsumerBudget(id(consumer), config, settings.budget, group_id)
    except ValueError:
        Consumer.close(consumer)
        raise
    max_poll_s = float(config.get("max.poll.interval.ms", 300000)) / 1000
    auto_store, on_fatal, explain_rebalances = settings.auto_store, settings.on_fatal, settings.explain_rebalances
    meter_provider, tracer_provider = settings.meter_provider, settings.tracer_provider
    lock = threading.RLock()
    life = Lifecycle(lock, group_id, on_fatal, State.OPEN)
    ledger = PauseLedger()
    table = PartitionTable()
    client = RawClient(consumer, group_id, life.fail)
    client.instance_id = str(config["group.instance.id"]) if config.get("group.instance.id") else None
    if settings.auth_failure_timeout is not None:
        # A run of refusals ends once none came for longer than librdkafka's longest reconnect backoff.
        quiet = 2 * float(config.get("reconnect.backoff.max.ms", 10000)) / 1000
        client.auth = AuthWatch(settings.auth_failure_timeout, quiet)
    if settings.error_tap is not None:
        settings.error_tap.sink = client.reported
    gate = DeliveryGate(table, client, auto_store=auto_store)
    telemetry = LazyTelemetry(group_id, meter_provider=meter_provider, tracer_provider=tracer_provider)
    telemetry.bind(table)
    protocol = protocol_label(config)

    consumer_ref = weakref.ref(consumer)  # no part holds the consumer strongly (I10)

    def member_id() -> str | None:
        """This member's id in its group, if it has one (for the rebalance explainer's thread)."""
        live = consumer_ref()
        if life.state is not State.OPEN or live is None:
            return None
        try:
            return Consumer.memberid(live) or None
        except (RuntimeError, KafkaException):
            return None

    explainer = RebalanceExplainer(
        group_id=group_id,
        protocol=protocol,
        telemetry=telemetry,
        describer=GroupDescriber(config, group_id) if explain_rebalances and group_id else None,
        member_id=member_id,
        owned=lambda: len(table.owned),
    )
    client.on_error = explainer.error_seen
    joining = None
    if protocol == "consumer" and group_id and settings.migration_timeout != 0:
        joining = JoinGate(
            group_id,
            lambda: GroupDescriber(config, group_id),
            timeout=settings.migration_timeout,
            # Joins from the gate's thread as it opens (the reader's next call would otherwise).
            on_open=lambda: _locked(lock, life, rebalancer.join_due, time.monotonic()),
        )
        client.migration_reason = lambda: joining.reason if joining is not None else None
        client.config = config
    rebalancer = Rebalancer(
        consumer,
        client,
        table=table,
        ledger=ledger,
        gate=gate,
        telemetry=telemetry,
        incremental=is_incremental(config),
        protocol=protocol,
        explainer=explainer,
        closing=life.stopping,
        failed_in_close=life.callback_failed_in_close,
        owned_changed=budget.owned,
        # Long enough for a partition that did start to hand over what it fetched (an empty
        # fetch answers after fetch.wait.max.ms).
        requery_delay=float(config.get("fetch.wait.max.ms", 500)) / 1000 + 0.5,
        stall_cause=lambda keys, cause: stall.cause_known(keys, cause),  # noqa: PLW0108 - built just below
        joining=joining,
    )
    stall = StallGuard(
        client,
        table,
        bound=stall_bound(config),
        reset=str(config.get("auto.offset.reset", "latest")).lower(),
        restart=rebalancer.restart_stalled,
        counted=telemetry.stall_healed,
        tick=telemetry.wake,
    )
    client.on_failed_offset_fetch = rebalancer.failed_offset_fetch
    if joining is not None:
        client.on_refused_join = rebalancer.refused_join
        client.first_join = rebalancer.first_join
    reader = Reader(client, table, gate, rebalancer, stall, real_call_every=min(1.0, max_poll_s / 10))
    offsets = Offsets(
        life=life, client=client, table=table, gate=gate, rebalancer=rebalancer, commit_retry=settings.commit_retry
    )
    link = KeepaliveLink(consumer_ref, life, reader, rebalancer.set_parked, telemetry, holds_records=table.app_holds)
    keeper = Keeper(
        link,
        mode=settings.keepalive,
        after=positive("keepalive_after", settings.keepalive_after, max_poll_s / 2),
        ceiling=positive("keepalive_max", settings.keepalive_max, max_poll_s * 10),
        max_poll=max_poll_s,
    )
    life.bind(
        client=client,
        table=table,
        gate=gate,
        rebalancer=rebalancer,
        keeper=keeper,
        explainer=explainer,
        telemetry=telemetry,
        budget=budget,
    )
    budget.join(consumer)
    # Dropped without close(): freed where it is dropped (librdkafka's destroy leaves the group, as
    # upstream's), and our threads end with it.
    weakref.finalize(consumer, life.dropped).atexit = False
    poison = PoisonHandler(
        settings.poison,
        group_id=group_id,
        writer=DeadLetterWriter(group_id, admin_config(config, "dead-letters")),
        give_back=lambda msg: _locked(lock, life, reader.give_back_from, msg),
        keepalive=keeper.block,
        fail=life.fail,
        counted=telemetry.poisoned,
        # Owned, or revoked by an eager rebalance that may still give it back (limbo): only a
        # partition that left for good ends the retries (its next owner then reads the record).
        bounds=PartitionBounds(
            lambda msg: (msg.topic(), msg.partition()) in table.owned or (msg.topic(), msg.partition()) in table.limbo
        ),
    )
    return Parts(
        lock, life, ledger, table, client, gate, telemetry, explainer, rebalancer, reader, offsets, keeper, poison
    )


def _locked(lock: threading.RLock, life: Lifecycle, change: Any, *args: Any) -> None:
    """``change(*args)`` under the client lock, while the consumer is open (closed: nothing to change)."""
    with lock:
        if life.state is State.OPEN:
            change(*args)
