"""The consumer core: ``SafeConsumer``'s facade (it validates, guards and delegates) and the parts
it is built from.

- ``_facade``: the public class; ``_assembly`` builds and wires its parts; ``_config`` judges its config;
  ``_upstream`` answers as ``confluent_kafka.Consumer`` does where upstream decides; ``_deprecated``.
- ``_client``: the one boundary to librdkafka (every call, every error classified once).
- ``_partitions``: the partition table (ownership, pause intent, what the application holds), with
  ``_handout`` (its hand-out transitions) and ``_partition_state``;
  ``_pause``: the pause ledger (topic and consumer marks).
- ``_reader`` and ``_delivery``: reading ahead and the delivery gate (nothing of a paused or unowned
  partition reaches the application); ``_deferred``, ``_requery``.
- ``_rebalance``: librdkafka's rebalance callbacks under every protocol, with ``_restarts`` (seeks,
  partitions librdkafka does not fetch) and ``_pause_flags`` (pause marks and flags); ``_join_gate``: a
  consumer-protocol member's first join into a group between protocols.
- ``_lifecycle`` (open, closing, closed, failed), ``_offsets`` (commits and stores, ``_retry``),
  ``_keepalive``, ``_stall`` (the stall guard), ``_auth`` (refused logins).

Internal: applications import from :mod:`safeconsumer`.
"""
