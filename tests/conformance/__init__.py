"""Differential conformance suite: ``SafeConsumer`` against the installed ``confluent_kafka.Consumer``.

The oracle is upstream itself. Every case runs on both classes with the same config and the
same arguments, without a broker (``bootstrap.servers`` is a closed local port, every call that
could wait gets a zero timeout), and must end the same way: the same return value (compared by
value, ``TopicPartition`` offsets and errors included) and the same ``on_commit`` events, or the
same exception type with exactly upstream's ``args`` (normalized by value: a ``KafkaError`` by
its code, name, text and flags) and message. A subclass of upstream's exception type conforms
too (SPEC, "Drop-in means upstream's own behaviour"). PEP 678 notes, where SafeConsumer says
more than upstream, are recorded and shown but never compared (see :mod:`.harness`).

- :mod:`.harness`: running a case on one class, normalizing what it did, comparing, explaining.
- :mod:`.cases`: the table of argument cases for every public method and the constructor.
- :mod:`.allowed`: SPEC's deliberate differences, the only allow-list, each with its way back.
- ``test_table``: the table; ``test_generated``: hypothesis-generated argument shapes;
  ``test_allowed``: the allow-list's integrity and each entry's way back to upstream's behaviour.

A new confluent-kafka release that changes behaviour changes the oracle, so the suite fails
until SafeConsumer follows it (or the allow-list records the new upstream outcome).
"""
