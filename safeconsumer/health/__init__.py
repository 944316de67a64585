"""Group health and the operator's tools.

- ``_explainer``: every rebalance's cause; ``_describe_process``: its describes, in a child process.
- ``_memory``: the worst-case fetch memory of a process's consumers.
- ``doctor`` (``safeconsumer doctor``; its findings in ``_findings``, the KIP-848 check in
  ``_migrate_check``) and ``dead_letters`` (``safeconsumer dead-letters``), with ``_cli``.

Internal, except what :mod:`safeconsumer.doctor` offers.
"""
