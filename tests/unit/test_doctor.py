"""The doctor's findings and output from a described group (pure logic; the broker scenarios are in
tests/integration/test_doctor.py)."""

from __future__ import annotations

import json

import pytest

from safeconsumer.doctor import SCHEMA, MemberReport, Report, build_parser, findings, render


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
