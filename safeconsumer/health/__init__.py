"""The operator's tools, on top of the package: nothing below imports them.

- ``doctor`` (``safeconsumer doctor``): gathers, checks and reports. Its parts: ``_group_look``
  (what it reads from the cluster), ``_group_check`` (a group's findings and fetch memory),
  ``_report`` (the report, as JSON and text), ``_doctor_cli`` (the console script's parser),
  ``_findings`` (a finding), ``_migrate_check`` (the KIP-848 check), and for share groups
  ``_share_look``, ``_share_state`` and ``_share_check``.
- ``dead_letters`` (``safeconsumer dead-letters``), with ``_cli`` (what both commands share).

Internal, except what :mod:`safeconsumer.doctor` offers.
"""
