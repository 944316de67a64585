"""Describing a member's group: the admin API's answer as a :class:`GroupView` (its members, who owns
partitions, its type and assignor), asked by :class:`GroupDescriber` from a child process (see
:mod:`._describe_process`) so that librdkafka's admin threads never share the member's process for
long. Used by the rebalance explainer, the join gate of a migrating group, and the test kit."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..base._clients import HELPER_LOG, admin_config
from ._describe_process import DescribeProcess, description_fields, enum_name

logger = logging.getLogger("safeconsumer")


@dataclass(frozen=True)
class Member:
    """One member of a group, as the broker describes it."""

    member_id: str
    client_id: str
    host: str
    instance_id: str | None

    def __str__(self) -> str:
        instance = f", group.instance.id {self.instance_id}" if self.instance_id else ""
        return f"member {self.member_id} (client.id {self.client_id}, host {self.host}{instance})"


@dataclass(frozen=True)
class GroupView:
    """A group as described by the broker."""

    state: str
    members: dict[str, Member]
    #: The members that own partitions now (None: not told).
    owning: frozenset[str] | None = None
    #: The group's type: "CLASSIC" or "CONSUMER" (a consumer group, mixed or not); "" when not told.
    kind: str = ""
    #: The classic group's assignor (its protocol name: "range", "cooperative-sticky", ...); "" when none.
    assignor: str = ""
    #: How many partitions each member is assigned (None: not told).
    sizes: Mapping[str, int] | None = None

    def baseline(self, me: str | None, joined_with: int | None = None) -> dict[str, Member]:
        """The members to compare the next rebalance with (``joined_with``: how many partitions
        this member was assigned when it joined, if known).

        Described while the broker is rebalancing again already (a peer that joined a moment
        after this member is in the answer before this member's callback for it came), a
        member that owns nothing yet is one still joining: it is left out, so that the next
        rebalance names it. (One that owned nothing before is then named as joining too.)
        So it is when the answer is of a later generation, stable already: this member's
        assignment in it is not the one it joined with (a cooperative group's first round
        after a peer joined, described before this member's callback for it came).
        """
        later = (
            joined_with is not None and self.sizes is not None and me is not None and self.sizes.get(me) != joined_with
        )
        if self.owning is None or (self.state.upper() in ("STABLE", "EMPTY") and not later):
            return dict(self.members)
        return {k: m for k, m in self.members.items() if k == me or k in self.owning}


def describe_group(admin: Any, group_id: str, timeout: float) -> Any:
    """The admin API's description of one group (``ConsumerGroupDescription``).

    The one place safeconsumer describes a group (the explainer, the doctor, the test kit).
    Raises ``KafkaException``, or ``concurrent.futures.TimeoutError`` past ``timeout``.
    """
    future = admin.describe_consumer_groups([group_id], request_timeout=timeout)[group_id]
    return future.result(timeout=timeout + 1)


class GroupDescriber:
    """Describes one group through the admin API (its client created at first use)."""

    def __init__(self, config: Mapping[str, Any], group_id: str) -> None:
        self._conf = admin_config(config)
        self._group_id = group_id
        self._admin: Any = None
        self._released = False
        self._process = DescribeProcess(self._conf, HELPER_LOG)

    def release(self) -> None:
        """Drop the admin client (its threads end once it is collected) and end the describe
        process; describe no more."""
        self._released = True
        self._admin = None
        self._process.stop(final=True)

    def end_process(self) -> None:
        """End the describe process for good (quick: it is killed, not waited for; a describe
        waiting on it answers None). The admin client, if any, goes with :meth:`release`."""
        self._process.stop(final=True)

    def warm(self) -> None:
        """A describe is likely soon (the member subscribed): start the describe process now."""
        if not self._released and self._process.usable:
            self._process.warm()

    def between_rebalances(self) -> Any:
        """The in-process admin client, handed over for the caller to drop outside its locks (the
        describe process stays: it is not this process's memory, and the next rebalance soon after
        is explained the sooner; :meth:`idle` ends it)."""
        admin, self._admin = self._admin, None
        return admin

    @property
    def isolated(self) -> bool:
        """Whether describing happens in a child process (see :mod:`._describe_process`)."""
        return self._process.usable

    def idle(self) -> Callable[[], None]:
        """Nothing to explain for a while: what drops the admin client (its threads and buffers,
        a few MiB) and ends the describe process, for the caller to call outside its locks; the
        next rebalance creates them again."""
        admin, self._admin = self._admin, None
        process = self._process

        def drop() -> None:
            nonlocal admin
            admin = None
            process.stop()

        return drop

    def _client(self) -> Any:
        """The admin client, created at first use (may raise: the callers answer None)."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(self._conf)
        return self._admin

    def listed(self, timeout: float) -> GroupView | None:
        """The group's state and type from listing the cluster's groups (ListGroups, sent to every
        broker: no coordinator request, so none of librdkafka #4605's aborts when the coordinator's
        broker is down). No members and no assignor. None when it cannot be told: no answer, or a
        broker that did not answer may hold it. A group that does not exist is ``DEAD``."""
        if self._released:
            return None
        try:
            result = self._client().list_consumer_groups(request_timeout=timeout).result(timeout=timeout + 1)
        except Exception as exc:  # noqa: BLE001 - best effort: the caller asks again
            logger.debug("listing the groups failed: %s", exc)
            return None
        for listing in result.valid or []:
            if listing.group_id == self._group_id:
                return GroupView(enum_name(listing.state), {}, kind=enum_name(listing.type))
        if result.errors:
            logger.debug("listing the groups: %d broker(s) did not answer", len(result.errors))
            return None
        return GroupView("DEAD", {}, kind="")

    def describe(self, timeout: float) -> GroupView | None:
        """The group now, or None when the broker did not answer in time (logged at DEBUG)."""
        if self._released:
            return None
        if self._process.usable:
            try:
                fields = self._process.describe(self._group_id, timeout)
            except Exception as exc:  # noqa: BLE001 - explaining is best effort; never the consumer's failure
                logger.debug("describing group %r in the describe process failed: %s", self._group_id, exc)
                self._process.stop()
                return None
        else:
            try:
                fields = description_fields(describe_group(self._client(), self._group_id, timeout))
            except Exception as exc:  # noqa: BLE001 - explaining is best effort; never the consumer's failure
                logger.debug("describing group %r failed: %s", self._group_id, exc)
                return None
        return None if fields is None else view_of(fields)


def view_of(fields: Mapping[str, Any]) -> GroupView:
    """A :class:`GroupView` of a description's :func:`description_fields`."""
    members = fields["members"]
    return GroupView(
        fields["state"],
        {m["member_id"]: Member(m["member_id"], m["client_id"], m["host"], m["instance_id"]) for m in members},
        frozenset(m["member_id"] for m in members if m["partitions"]),
        kind=fields["kind"],
        assignor=fields["assignor"],
        sizes={m["member_id"]: m["partitions"] for m in members},
    )
