"""The group runtime: what a member knows of its group. Describing it and explaining its rebalances
(``_explainer``, ``_describe_process``), the fetch-memory budget (``_memory``), a share group's settings,
start and dead-letter queue (``_share``, ``_dlq``), and the Kafka protocol client they and the operator
tools read the cluster with (``_wire``). It imports only the base."""
