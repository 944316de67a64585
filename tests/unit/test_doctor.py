"""The doctor's findings and output from a described group (pure logic; the broker scenarios are in
tests/integration/test_doctor.py)."""

from __future__ import annotations

import json

import pytest

from safeconsumer.group._memory import FetchLimits
from safeconsumer.health.doctor import (
    SCHEMA,
    MemberReport,
    Report,
    build_parser,
    fetch_memory,
    findings,
    main,
    membership_changes,
    read_properties,
    render,
)


def _member(mid: str, client: str, **assignment: list[int]) -> MemberReport:
    return MemberReport(mid, client, "/10.0.0.1", None, dict(assignment))


def _report(members: list[MemberReport], limit: int | None = None) -> Report:
    report = Report(
        group="g",
        bootstrap_servers="b:9092",
        protocol="classic",
        state="stable",
        assignor="range",
        coordinator={"id": 1, "host": "b", "port": 9092},
        limit=None if limit is None else {"setting": "group.max.size", "value": limit},
        members=members,
        findings=[],
    )
    report.findings = findings(report)
    return report


def test_one_application_is_healthy() -> None:
    report = _report([_member("m1", "orders", orders=[0, 1]), _member("m2", "orders", orders=[2]), _member("m3", "x")])
    assert report.healthy and report.findings == []
    assert "healthy: no findings" in render(report)


def test_members_consuming_disjoint_topics_share_the_group_id() -> None:
    report = _report(
        [
            _member("a1", "orders", orders=[0]),
            _member("a2", "orders", orders=[1], refunds=[0]),
            _member("b1", "billing", invoices=[0, 1]),
        ]
    )
    (finding,) = report.findings
    assert finding.code == "shared_group_id" and finding.severity == "warning"
    assert finding.details["applications"] == [
        {"topics": ["orders", "refunds"], "members": ["a1", "a2"]},
        {"topics": ["invoices"], "members": ["b1"]},
    ]
    assert "billing consume invoices" in finding.message and "own group.id" in finding.advice


def test_members_linked_through_a_shared_topic_are_one_application() -> None:
    report = _report([_member("m1", "c", t1=[0]), _member("m2", "c", t2=[0]), _member("m3", "c", t1=[1], t2=[1])])
    assert report.findings == []


@pytest.mark.parametrize(
    ("members", "limit", "severity"),
    [(2, 2, "critical"), (8, 10, "warning"), (7, 10, None), (3, 0, None), (3, None, None)],
)
def test_group_size_against_the_broker_limit(members: int, limit: int | None, severity: str | None) -> None:
    report = _report([_member(f"m{i}", "c", t=[i]) for i in range(members)], limit)
    sized = [f for f in report.findings if f.code == "group_size"]
    assert [f.severity for f in sized] == ([severity] if severity else [])


def test_a_group_without_members_is_reported() -> None:
    report = _report([])
    assert [f.code for f in report.findings] == ["group_empty"]


def test_the_json_shape_is_stable() -> None:
    report = _report([_member("a1", "orders", orders=[0]), _member("b1", "billing", invoices=[0])], 2)
    data = json.loads(json.dumps(report.to_json()))
    assert data["schema"] == SCHEMA == 1
    assert set(data) == {
        "schema",
        "group",
        "bootstrap_servers",
        "protocol",
        "state",
        "assignor",
        "coordinator",
        "limit",
        "members",
        "findings",
        "consumer",
        "brokers",
        "topics",
        "fetch_memory",
        "observed",
        "healthy",
    }
    assert set(data["members"][0]) == {"member_id", "client_id", "host", "instance_id", "assignment"}
    assert set(data["findings"][0]) == {"code", "severity", "message", "advice", "details"}
    assert data["healthy"] is False
    assert [f["code"] for f in data["findings"]] == ["shared_group_id", "group_size"]


def test_bad_arguments_are_argparse_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["doctor", "--group", "g"],
        ["doctor", "--bootstrap-servers", "b", "--group", "g", "-X", "novalue"],
        [],
    ):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(argv)
        assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--bootstrap-servers" in err and "expected key=value" in err and "Traceback" not in err


def _with(report: Report, **fields: object) -> Report:
    for name, value in fields.items():
        setattr(report, name, value)
    report.fetch_memory = fetch_memory(report)
    report.findings = findings(report)
    return report


def test_fetch_memory_over_the_budget_names_its_largest_parts() -> None:
    members = [_member("m1", "orders", orders=list(range(50))), _member("m2", "orders", orders=[50])]
    quiet = _with(_report(members), topics={"orders": {"max_message_bytes": 1048588}})
    assert quiet.healthy, "one consumer of 50 partitions fits 1 GiB"
    memory = quiet.fetch_memory
    assert memory is not None and memory["partitions_per_consumer"] == 50 and memory["largest_record"] == 1048588
    loud = _with(_report(members), topics={"orders": {"max_message_bytes": 8 << 20}}, consumers_per_process=4)
    (finding,) = loud.findings
    assert finding.code == "fetch_memory" and finding.details["total"] > finding.details["budget"] == 1 << 30
    assert "4 consumer(s) per process with 50 partition(s)" in finding.message
    assert finding.message.index("in-flight") < finding.message.index("queue"), "largest part first"
    assert "fetch memory" in render(loud)
    # One broker answers one fetch at a time: at most max(fetch.max.bytes, record) in flight.
    capped = _with(_report(members), topics={"orders": {"max_message_bytes": 8 << 20}}, brokers=1)
    assert capped.fetch_memory is not None
    assert capped.fetch_memory["per_consumer"]["in_flight"] == 52428800


def test_record_size_above_what_a_response_may_carry() -> None:
    members = [_member("m1", "orders", orders=[0], invoices=[0])]
    limits = FetchLimits.from_config({"fetch.max.bytes": 1 << 20, "receive.message.max.bytes": 2 << 20})
    report = _with(
        _report(members),
        consumer=vars(limits),
        topics={"orders": {"max_message_bytes": 1048588}, "invoices": {"max_message_bytes": 8 << 20}},
    )
    (finding,) = report.findings
    assert finding.code == "record_size" and finding.severity == "critical"
    assert "'invoices'" in finding.message and str(8 << 20) in finding.message
    assert f"at least {(8 << 20) + 512}" in finding.advice
    # Defaults (100 MB) carry both; an unreadable topic limit says nothing.
    assert _with(_report(members), topics={"invoices": {"max_message_bytes": None}}).healthy


def _seen(mid: str, client: str, instance: str | None = None) -> MemberReport:
    return MemberReport(mid, client, "/10.0.0.1", instance, {"orders": [0]})


def test_membership_changes_count_restarts() -> None:
    a, b1, b2, b3 = _seen("a", "api"), _seen("b1", "worker"), _seen("b2", "worker"), _seen("b3", "worker")
    seen = membership_changes([[a, b1], [a, b1], [a], [a, b2], [a, b3], [a, b3]])
    # b1 left and b2 joined a snapshot later (a restart); b2 -> b3 in one step (another).
    assert seen == {"membership_changes": 3, "restarts": 2, "without_instance_id": 2}
    # A member that only left, or one that only joined, is no restart.
    assert membership_changes([[a, b1], [a], [a, _seen("c", "other")]])["restarts"] == 0
    # Static members keep their identity across restarts (a new member id, the same instance id).
    s1, s2 = _seen("s1", "worker", "w-0"), _seen("s2", "worker", "w-0")
    assert membership_changes([[a, s1], [a, s2]])["membership_changes"] == 0


def test_static_membership_when_the_group_changes_often() -> None:
    members = [_seen("a", "api"), _seen("b3", "worker")]
    often = {"seconds": 30.0, "membership_changes": 3, "restarts": 1, "without_instance_id": 4}
    (finding,) = _with(_report(members), observed=often).findings
    assert finding.code == "static_membership" and "group.instance.id" in finding.advice
    assert "changed 3 time(s) in 30 s (1 restart(s)" in finding.message
    assert _with(_report(members), observed={**often, "membership_changes": 1}).healthy
    assert _with(_report(members), observed={**often, "without_instance_id": 0}).healthy
    assert "observed     3 membership change(s)" in render(_with(_report(members), observed=often))


def test_properties_files() -> None:
    assert read_properties(["# comment", "", " fetch.max.bytes = 1024 ", "a=b=c"], "f") == {
        "fetch.max.bytes": "1024",
        "a": "b=c",
    }
    with pytest.raises(ValueError, match="f:2: expected key=value"):
        read_properties(["a=1", "oops"], "f")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--consumers-per-process", "0"], "expected at least 1"),
        (["--fetch-memory-budget", "lots"], "expected a positive size"),
        (["--fetch-memory-budget", "2TB"], "expected a positive size"),
        (["--observe", "-1"], "expected 0 to 3600 seconds"),
        (["--consumer-config", "/nonexistent/consumer.properties"], "can't open"),
        (["-X", "queued.max.messages.kbytes=lots"], "queued.max.messages.kbytes must be an integer"),
    ],
)
def test_bad_new_arguments_are_argparse_errors(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["doctor", "--bootstrap-servers", "127.0.0.1:1", "--group", "g", *extra])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_sizes_take_binary_units() -> None:
    args = build_parser().parse_args(
        ["doctor", "--bootstrap-servers", "b", "--group", "g", "--fetch-memory-budget", "512MiB"]
    )
    assert args.fetch_memory_budget == 512 << 20
