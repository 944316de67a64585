"""The doctor's share-group parts that are pure logic: the protocol codec, the SCRAM exchange, the
connection settings it takes from librdkafka's, and the share findings. What the broker answers is
tested against the real broker (tests/integration/test_doctor_share.py)."""

from __future__ import annotations

from typing import Any

import pytest

from safeconsumer.group._wire import Reader, Scram, Settings, Unsupported, WireError, Writer, _finalized_features
from safeconsumer.health._share_check import progress, render_share, share_findings
from safeconsumer.health._share_look import ShareGroup, ShareMember, SharePartition
from safeconsumer.health._share_state import SNAPSHOT_SEEN, parse_update
from safeconsumer.health.dead_letters import DeadRecord, _mark_processed, _render, _view


def test_compact_and_classic_types_read_back_as_written() -> None:
    data = (
        Writer()
        .int8(-2)
        .int16(-300)
        .int32(70000)
        .uvarint(300)
        .string("classic")
        .string(None)
        .compact_string("compact ü")
        .compact_string(None)
        .compact_bytes(b"\x00\x01")
        .compact_array([1, 2, 3], Writer.int32)
        .compact_array(None, Writer.int32)
        .boolean(True)
        .tags()
        .bytes()
    )
    r = Reader(data)
    assert (r.int8(), r.int16(), r.int32(), r.uvarint()) == (-2, -300, 70000, 300)
    assert (r.string(), r.string(), r.compact_string(), r.compact_string()) == ("classic", None, "compact ü", None)
    assert r.compact_bytes() == b"\x00\x01"
    assert r.compact_array(Reader.int32) == [1, 2, 3] and r.compact_array(Reader.int32) == []
    assert r.boolean() is True
    r.skip_tags()
    with pytest.raises(WireError, match="ended early"):
        r.int8()


def test_tagged_fields_are_skipped() -> None:
    # Two tagged fields: tag 0 of 3 bytes, tag 5 of 1 byte; then an int16.
    r = Reader(bytes([2, 0, 3, 9, 9, 9, 5, 1, 7]) + (42).to_bytes(2, "big"))
    r.skip_tags()
    assert r.int16() == 42


def test_scram_sha_256_matches_rfc_7677() -> None:
    """RFC 7677 section 3's exchange (user "user", password "pencil")."""
    scram = Scram("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert scram.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert scram.final(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    scram.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(WireError, match="signature does not match"):
        scram.verify(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
    with pytest.raises(WireError, match="refused the SCRAM login: invalid-proof"):
        scram.verify(b"e=invalid-proof")


def test_a_scram_challenge_with_another_nonce_is_refused() -> None:
    scram = Scram("SCRAM-SHA-512", "u", "p", nonce="abc")
    with pytest.raises(WireError, match="malformed"):
        scram.final(b"r=zzz,s=c2FsdA==,i=4096")


def test_settings_are_read_from_librdkafka_keys_and_hold_no_secret_in_their_repr() -> None:
    s = Settings.from_config(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "scram-sha-512",
            "sasl.username": "app",
            "sasl.password": "s3cret",
            "ssl.ca.location": "/ca.pem",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert s.tls and s.sasl and s.mechanism == "SCRAM-SHA-512" and not s.check_hostname and s.verify
    assert "s3cret" not in repr(s)
    assert not Settings.from_config({}).tls and not Settings.from_config({}).sasl


@pytest.mark.parametrize(
    ("conf", "named"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism=GSSAPI"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism=OAUTHBEARER"),
        ({"security.protocol": "ssl", "ssl.keystore.location": "/k.p12"}, "ssl.keystore.location"),
        ({"security.protocol": "carrier-pigeon"}, "security.protocol='carrier-pigeon'"),
    ],
)
def test_settings_this_client_cannot_honour_are_named(conf: dict[str, Any], named: str) -> None:
    with pytest.raises(Unsupported, match=named.replace("(", r"\(")):
        Settings.from_config(conf)


def _share(**overrides: Any) -> dict[str, Any]:
    share: dict[str, Any] = {
        "epoch": 3,
        "settings_readable": True,
        "start": "earliest",
        "start_set_on_group": True,
        "lock_ms": 30_000,
        "max_lock_ms": 60_000,
        "delivery_count_limit": 5,
        "max_poll_records": 500,
        "processing_time": None,
        "lag": 0,
        "partitions": [
            {
                "topic": "t",
                "partition": 0,
                "log_start": 0,
                "log_end": 10,
                "start_offset": 10,
                "lag": 0,
                "unstarted_records": None,
                "error": None,
            }
        ],
        "in_flight": None,
        "archived": None,
    }
    share.update(overrides)
    return share


def _codes(share: dict[str, Any], observed: dict[str, Any] | None = None, members: int = 2) -> list[str]:
    return [f.code for f in share_findings("g", members, share, observed)]


def _unstarted(held: int | None) -> list[dict[str, Any]]:
    """A partition where the group has no start yet, holding ``held`` records."""
    return [{**_share()["partitions"][0], "start_offset": None, "lag": None, "unstarted_records": held}]


def test_a_latest_start_nobody_chose_on_partitions_holding_records_without_a_start_is_found() -> None:
    latest = {"start": "latest", "start_set_on_group": False}
    assert _codes(_share(**latest, partitions=_unstarted(10))) == ["share_start_latest"]
    (finding,) = share_findings("g", 2, _share(**latest, partitions=_unstarted(10)), None)
    assert finding.details["unstarted_records"] == 10 and "nothing says so" in finding.message
    # A caught-up group with a start: what lies before it was processed or skipped, not known: no finding.
    assert _codes(_share(**latest)) == []
    assert _codes(_share(start="latest", start_set_on_group=True, partitions=_unstarted(10))) == []  # chosen
    assert _codes(_share(partitions=_unstarted(10))) == []  # earliest
    assert _codes(_share(**latest, partitions=_unstarted(0))) == []
    unreadable = [{**_unstarted(None)[0], "error": 29}]  # an ACL: unknown, never taken for "no start"
    assert _codes(_share(**latest, partitions=unreadable)) == []
    # The group's settings could not be read: the start is not known, not guessed.
    assert _codes(_share(**latest, settings_readable=False, partitions=_unstarted(10))) == []


def test_processing_against_the_lock() -> None:
    assert _codes(_share(processing_time=30.0)) == ["lock_too_short"]
    assert _codes(_share(processing_time=0.1)) == ["batch_outlives_lock"]  # 500 x 0.1 s = 50 s > 30 s
    (finding,) = share_findings("g", 1, _share(processing_time=0.1), None)
    assert finding.details["fits"] == 225 and "at most 225" in finding.advice  # 0.75 x 30 s / 0.1 s
    assert "at most 60000 ms" in finding.advice
    assert _codes(_share(processing_time=0.05)) == []  # 25 s < 30 s
    assert _codes(_share(processing_time=30.0), members=0) == []  # no members: nothing processes (group_empty says so)


def _snap(*parts: tuple[int, int | None], assigned: bool = True, error: int = 0) -> ShareGroup:
    members = [ShareMember("m", "c", "/h", None, 1, ["t"], {"t": [0]} if assigned else {})]
    return ShareGroup(
        "g", "stable", 1, "simple", {}, members, [SharePartition("t", 0, start, lag, error) for start, lag in parts]
    )


def test_progress_is_a_start_that_moves_or_nothing_left_to_deliver() -> None:
    assert progress([_snap((5, 3)), _snap((5, 3)), _snap((5, 2))]) == [
        {"topic": "t", "partition": 0, "start_offset": 5, "lag": 2}
    ]
    assert progress([_snap((5, 3)), _snap((6, 2))]) == []  # moved
    assert progress([_snap((5, 3)), _snap((5, 0))]) == []  # nothing waits
    # A start first told is not a move; a group with no start yet is judged by its start setting.
    assert progress([_snap((-1, None)), _snap((0, 5))]) == [{"topic": "t", "partition": 0, "start_offset": 0, "lag": 5}]
    assert progress([_snap((-1, None)), _snap((-1, None))])[0]["start_offset"] is None
    assert progress([_snap((5, 3))]) == []  # one look says nothing
    # A partition no member is assigned keeps its lag and says nothing; an unreadable one is unknown.
    assert progress([_snap((5, 3), assigned=False), _snap((5, 3), assigned=False)]) == []
    assert progress([_snap((-1, None), error=29), _snap((-1, None), error=29)]) == []


def test_no_progress_is_found_only_when_watched_longer_than_the_lock() -> None:
    stuck = {"seconds": 3.0, "no_progress": [{"topic": "t", "partition": 0, "start_offset": 5, "lag": 2}]}
    assert _codes(_share(lock_ms=1000), stuck) == ["share_no_progress"]
    assert _codes(_share(lock_ms=2000), stuck) == []  # watched less than two locks: a slow batch looks the same
    assert _codes(_share(lock_ms=1000), stuck, members=0) == []
    unknown = {"seconds": 3.0, "no_progress": [{"topic": "t", "partition": 0, "start_offset": None, "lag": None}]}
    assert _codes(_share(lock_ms=1000), unknown) == ["share_no_progress"]  # earliest, records held
    assert _codes(_share(lock_ms=1000, start="latest", start_set_on_group=True), unknown) == []  # may be nothing


def test_the_share_section_renders_every_partition() -> None:
    text = "\n".join(render_share(_share(processing_time=0.5, lag=None)))
    assert "start        earliest (set on the group)" in text
    assert "lock         30 s per acquisition" in text and "archived after 5 deliveries" in text
    assert "lag          unknown; in flight and archived: not told to clients" in text
    assert "processing   up to 0.5 s per record" in text
    assert "t      0          0          10           10" in text


def test_a_last_delivery_copy_may_be_processed_unless_a_failure_copy_of_the_record_follows() -> None:
    def dead(offset: int, original: int, stage: str) -> tuple[DeadRecord, Any]:
        return DeadRecord(0, offset, "t", 0, original, "g", stage, "X", "m", 1.0), None

    marked = _mark_processed([dead(0, 7, "last-delivery"), dead(1, 8, "last-delivery"), dead(2, 8, "process")])
    assert [v.may_be_processed for v, _ in marked] == [True, False, False]
    text = _render("dlt", [v for v, _ in marked], 0)
    assert "3 record(s), 1 of them copied at their last delivery and may also have been processed" in text
    assert text.count("(may also have been processed)") == 1


# Records the Kafka 4.3.1 test broker wrote to __share_group_state for group "exp-g" (one partition):
# offsets 0-1 accepted and 2-5 released; then 2-3 released again at the limit of 2 and 4-5 accepted.
_KEY_HEX = "000100056578702d6753a1b29e60f24fe19cf58aadedb4a1c100000000"
_UPDATES_HEX = (
    "000000000000000000000000000000000000030000000000000000000000000000000102000100000000000000000200000000000000050000010001000400000002",
    "000000000000000000000000000000000002030000000000000002000000000000000304000200000000000000000400000000000000050200020001000400000004",
)


def test_state_log_updates_are_read_as_the_broker_writes_them() -> None:
    key = bytes.fromhex(_KEY_HEX)
    first, second = (parse_update(key, bytes.fromhex(v), "exp-g") for v in _UPDATES_HEX)
    assert first is not None and second is not None
    assert first[1] == 0 and first[2] == [(0, 1, 2, 1), (2, 5, 0, 1)]  # accepted; given back
    assert second[2] == [(2, 3, 4, 2), (4, 5, 2, 2)]  # archived at delivery 2; accepted
    assert parse_update(key, bytes.fromhex(_UPDATES_HEX[0]), "another-group") is None
    snapshot_key = b"\x00\x00" + key[2:]
    assert parse_update(snapshot_key, b"", "exp-g") is SNAPSHOT_SEEN  # counted, not read as a change
    with pytest.raises(WireError, match="unknown version"):
        parse_update(key, b"\x00\x07" + bytes.fromhex(_UPDATES_HEX[0])[2:], "exp-g")


def test_records_archived_while_watched_are_found_with_how_many_reached_the_limit() -> None:
    log = {
        "archived": 3,
        "archived_by_delivery_count": {"1": 1, "5": 2},
        "archived_offsets": {"t [0]": [[4, 4], [7, 8]]},
        "given_back": 4,
    }
    (finding,) = share_findings("g", 1, _share(), {"seconds": 3.0, "no_progress": [], "state_log": log})
    assert finding.code == "share_archived" and finding.details["at_limit"] == 2
    assert (
        "t [0] at 4, 7-8" in finding.message
        and "2 had reached" in finding.message
        and "1 were rejected" in finding.message
    )
    assert _codes(_share(), {"seconds": 3.0, "no_progress": [], "state_log": {"error": "no access"}}) == []


def test_tls_settings_follow_librdkafka_s_spellings_and_ca_forms(tmp_path: Any) -> None:
    assert not Settings.from_config({"enable.ssl.certificate.verification": "f"}).verify
    assert Settings.from_config({"enable.ssl.certificate.verification": "true"}).verify
    # ssl.ca.location as a directory or "probe" (the system's store): both load.
    Settings.from_config({"security.protocol": "ssl", "ssl.ca.location": str(tmp_path)}).tls_context()
    Settings.from_config({"security.protocol": "ssl", "ssl.ca.location": "probe"}).tls_context()
    with pytest.raises(Unsupported, match=r"ssl\.crl\.location"):
        Settings.from_config({"security.protocol": "ssl", "ssl.crl.location": "/crl.pem"})
    with pytest.raises(Unsupported, match=r"ssl\.key\.location without ssl\.certificate\.location"):
        Settings.from_config({"security.protocol": "ssl", "ssl.key.location": "/key.pem"})


def test_a_malformed_scram_challenge_is_a_wire_error_never_a_traceback() -> None:
    for challenge in (
        b"\xff\xfe",
        b"r=abcX,s=!!notbase64,i=4096",
        b"r=abcX,s=c2FsdA==,i=lots",
        b"r=abc,s=c2FsdA==,i=1",
    ):
        with pytest.raises(WireError, match="malformed"):
            Scram("SCRAM-SHA-256", "u", "p", nonce="abc").final(challenge)
    with pytest.raises(WireError, match="does not match"):
        Scram("SCRAM-SHA-256", "u", "p", nonce="abc").verify(b"v=\xff")


@pytest.mark.parametrize(
    ("dlq", "codes"),
    [
        (None, []),  # a cluster without share-group DLQs (Kafka 4.3)
        ({"topic": None, "copy_record": False, "share_version": 1, "problem": None}, []),
        ({"topic": None, "copy_record": False, "share_version": 2, "problem": None}, ["share_no_dlq"]),
        ({"topic": "dlq.o", "copy_record": True, "share_version": 2, "problem": None}, []),
        (
            {"topic": "dlq.o", "copy_record": True, "share_version": 2, "problem": "topic 'dlq.o' lacks it"},
            ["share_dlq_cannot_copy"],
        ),
    ],
)
def test_the_doctor_flags_a_dlq_the_broker_cannot_write_and_a_group_without_one(
    dlq: dict[str, Any] | None, codes: list[str]
) -> None:
    share = _share(dlq=dlq)
    assert _codes(share) == codes
    text = "\n".join(render_share(share))
    if dlq is None:
        assert "dlq " not in text
    elif dlq["topic"] is None:
        assert "dlq          none, share.version" in text
    else:
        assert f"dlq          {dlq['topic']} (records; " in text
        assert ("cannot be written" in text) is bool(dlq["problem"])


def _feature(w: Writer, item: tuple[str, int]) -> Writer:
    return w.compact_string(item[0]).int16(item[1]).int16(1).tags()


def test_the_cluster_s_finalized_features_are_read_from_api_versions_tagged_fields() -> None:
    """ApiVersions v3 after its throttle: tagged fields, of which tag 2 holds FinalizedFeatures (name,
    max level, min level); others (tag 0 SupportedFeatures, tag 1 the epoch) are skipped."""
    features = Writer().compact_array([("share.version", 2), ("metadata.version", 33)], _feature).bytes()
    epoch = Writer().raw(b"\x00" * 8).bytes()
    body = Writer().uvarint(2).uvarint(1).uvarint(len(epoch)).raw(epoch).uvarint(2).uvarint(len(features))
    assert _finalized_features(Reader(body.raw(features).bytes())) == {"share.version": 2, "metadata.version": 33}
    assert _finalized_features(Reader(Writer().uvarint(0).bytes())) == {}


class _Copy:
    """A broker's DLQ copy as confluent-kafka hands it out (what ``_view`` reads of it)."""

    def __init__(self, headers: list[tuple[str, bytes]], timestamp: int) -> None:
        self._headers, self._timestamp = headers, timestamp

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)


@pytest.mark.parametrize(
    ("message", "stage", "may_be_processed"),
    [
        ("Offset rejected by client.", "rejected", False),
        ("Offset delivery count exceeded the threshold.", "delivery-limit", True),
    ],
)
def test_a_broker_s_copy_reads_into_the_same_view(message: str, stage: str, may_be_processed: bool) -> None:
    import time

    headers = [
        ("__dlq.errors.topic", b"orders"),
        ("__dlq.errors.partition", b"2"),
        ("__dlq.errors.offset", b"41"),
        ("__dlq.errors.group", b"billing"),
        ("__dlq.errors.delivery.count", b"3"),
        ("__dlq.errors.message", message.encode()),
    ]
    view = _view(_Copy(headers, int(time.time() * 1000) - 5000), 0, 7)  # type: ignore[arg-type]
    assert (view.original_topic, view.original_partition, view.original_offset, view.group) == (
        "orders",
        2,
        41,
        "billing",
    )
    assert (view.stage, view.may_be_processed, view.by_broker, view.delivery_count) == (
        stage,
        may_be_processed,
        True,
        3,
    )
    assert view.exception_class is None and view.exception_message == message
    assert view.age_seconds is not None and 4 <= view.age_seconds <= 60
    text = _render("dlq.orders", [view], 0)
    assert f"{stage} (by the broker, delivery 3): {message}" in text
