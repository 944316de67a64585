"""The soak: SafeConsumer member processes in one group, started and killed at random, each
pausing, resuming and keeping alive at random, while a producer keeps writing.

``python -m tests.soak.run`` runs it (``make soak``); ``tests/integration/test_soak.py`` runs a
short one per protocol. :mod:`.member` is one member process, :mod:`.run` the controller.
"""
