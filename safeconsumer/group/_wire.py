"""A small Kafka protocol client: the requests librdkafka's admin API does not make.

confluent-kafka (2.16) and librdkafka describe no share group (KIP-932): ``describe_consumer_groups``
answers a share group as an empty ``DEAD`` classic group, ``list_consumer_groups`` leaves it out.
The doctor asks the group coordinator itself, with the protocol's own requests, over one TCP
connection per broker: ``ApiVersions``, ``FindCoordinator``, ``ShareGroupDescribe`` and
``DescribeShareGroupOffsets`` (:mod:`._share_look`).

It connects as librdkafka would with the same settings: ``security.protocol`` ``plaintext``,
``ssl``, ``sasl_plaintext`` or ``sasl_ssl``; SASL ``PLAIN``, ``SCRAM-SHA-256`` and
``SCRAM-SHA-512`` (the server's signature is checked); TLS with ``ssl.ca.location`` (or
``ssl.ca.pem``), a client certificate (``ssl.certificate.location``, ``ssl.key.location``,
``ssl.key.password``), ``ssl.endpoint.identification.algorithm`` and
``enable.ssl.certificate.verification``. Anything else it cannot do (``GSSAPI``,
``OAUTHBEARER``, a keystore) is :class:`Unsupported`, naming the setting. Credentials are never
logged or put in an error's text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..base._version import __version__

_T = TypeVar("_T")

API_VERSIONS, FIND_COORDINATOR, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 10, 17, 36

#: The protocol's error codes the client acts on (Kafka's ``Errors``).
NONE, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 14, 15, 16
GROUP_AUTHORIZATION_FAILED, GROUP_ID_NOT_FOUND, SASL_AUTHENTICATION_FAILED = 30, 69, 58

#: Errors after which asking again (a new coordinator lookup) may answer.
RETRIABLE = frozenset({COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})

#: The largest response this client reads (a describe of a big group is well below).
MAX_RESPONSE = 64 << 20


class WireError(Exception):
    """The cluster could not be asked (connection, login, protocol)."""


class Unsupported(WireError):
    """The connection settings need something this client does not do (named in the message)."""


class NotOffered(Unsupported):
    """The broker does not offer a request this client needs (an older Kafka)."""


class KafkaProtocolError(WireError):
    """The broker answered with an error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- encoding ------------------------------------------------------------------------------------


class Writer:
    """A request body: Kafka's primitive types, classic and compact (flexible versions)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def raw(self, data: bytes) -> Writer:
        self._parts.append(data)
        return self

    def int8(self, v: int) -> Writer:
        return self.raw(struct.pack(">b", v))

    def int16(self, v: int) -> Writer:
        return self.raw(struct.pack(">h", v))

    def int32(self, v: int) -> Writer:
        return self.raw(struct.pack(">i", v))

    def boolean(self, v: bool) -> Writer:
        return self.int8(1 if v else 0)

    def uvarint(self, v: int) -> Writer:
        out = bytearray()
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        return self.raw(bytes(out))

    def string(self, v: str | None) -> Writer:
        """A classic (int16-length) nullable string."""
        if v is None:
            return self.int16(-1)
        data = v.encode()
        return self.int16(len(data)).raw(data)

    def compact_string(self, v: str | None) -> Writer:
        if v is None:
            return self.uvarint(0)
        data = v.encode()
        return self.uvarint(len(data) + 1).raw(data)

    def compact_bytes(self, v: bytes) -> Writer:
        return self.uvarint(len(v) + 1).raw(v)

    def compact_array(self, items: list[_T] | None, each: Callable[[Writer, _T], object]) -> Writer:
        if items is None:
            return self.uvarint(0)
        self.uvarint(len(items) + 1)
        for item in items:
            each(self, item)
        return self

    def tags(self) -> Writer:
        """No tagged fields."""
        return self.uvarint(0)

    def bytes(self) -> bytes:
        return b"".join(self._parts)


class Reader:
    """A response body, read front to back."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self._at + n > len(self._data):
            raise WireError("the broker's response ended early (a protocol mismatch)")
        out = self._data[self._at : self._at + n]
        self._at += n
        return out

    def int8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def boolean(self) -> bool:
        return self.int8() != 0

    def uuid(self) -> bytes:
        return self._take(16)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise WireError("a malformed varint in the broker's response")

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._take(n).decode("utf-8", "replace")

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode("utf-8", "replace")

    def compact_str(self) -> str:
        """A compact string that is never null (null reads as empty)."""
        return self.compact_string() or ""

    def bytes_(self) -> bytes:
        n = self.int32()
        return b"" if n < 0 else self._take(n)

    def compact_bytes(self) -> bytes:
        n = self.uvarint()
        return b"" if n == 0 else self._take(n - 1)

    def array(self, each: Callable[[Reader], _T]) -> list[_T]:
        n = self.int32()
        return [each(self) for _ in range(max(0, n))]

    def compact_array(self, each: Callable[[Reader], _T]) -> list[_T]:
        n = self.uvarint()
        return [each(self) for _ in range(max(0, n - 1))]

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def skip(self, n: int) -> None:
        self._take(n)


# -- connection settings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """How to connect, read from librdkafka's settings (:meth:`from_config`)."""

    security_protocol: str = "plaintext"
    mechanism: str = "GSSAPI"
    username: str = field(default="", repr=False)
    password: str = field(default="", repr=False)
    ca_location: str | None = None
    ca_pem: str | None = field(default=None, repr=False)
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    verify: bool = True
    client_id: str = "safeconsumer-doctor"

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("ssl", "sasl_ssl")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("sasl_plaintext", "sasl_ssl")

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> Settings:
        """Raises :class:`Unsupported` naming a setting this client cannot honour."""
        protocol = str(conf.get("security.protocol", "plaintext")).lower()
        if protocol not in ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"):
            raise Unsupported(f"security.protocol={protocol!r} is not one this client speaks")
        mechanism = str(conf.get("sasl.mechanisms", conf.get("sasl.mechanism", "GSSAPI"))).upper()
        if protocol.startswith("sasl") and mechanism not in ("PLAIN", *_SCRAM):
            raise Unsupported(f"sasl.mechanism={mechanism} (this client logs in with PLAIN or SCRAM only)")
        tls = protocol in ("ssl", "sasl_ssl")
        for key in (
            "ssl.keystore.location",
            "ssl.certificate.pem",
            "ssl.key.pem",
            "ssl.engine.location",
            "ssl.crl.location",
        ):
            if conf.get(key) and tls:
                raise Unsupported(f"{key} is not read by this client")
        if tls and conf.get("ssl.key.location") and not conf.get("ssl.certificate.location"):
            raise Unsupported("ssl.key.location without ssl.certificate.location")
        identification = str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower()
        verify = str(conf.get("enable.ssl.certificate.verification", "true")).lower() not in _FALSE

        def text(key: str) -> str | None:
            value = conf.get(key)
            return None if value is None else str(value)

        return cls(
            security_protocol=protocol,
            mechanism=mechanism,
            username=str(conf.get("sasl.username", "")),
            password=str(conf.get("sasl.password", "")),
            ca_location=text("ssl.ca.location"),
            ca_pem=text("ssl.ca.pem"),
            certificate_location=text("ssl.certificate.location"),
            key_location=text("ssl.key.location"),
            key_password=text("ssl.key.password"),
            check_hostname=verify and identification == "https",
            verify=verify,
            client_id=str(conf.get("client.id", "safeconsumer-doctor")),
        )

    def tls_context(self) -> ssl.SSLContext:
        """As librdkafka reads ``ssl.ca.location``: a file, a directory, or ``probe`` (the system's)."""
        location = None if self.ca_location in (None, "", "probe") else self.ca_location
        directory = location if location is not None and os.path.isdir(location) else None
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH,
            cafile=None if directory else location,
            capath=directory,
            cadata=self.ca_pem,
        )
        if self.ca_location == "probe" and self.ca_pem is not None:
            context.load_default_certs()
        context.check_hostname = self.check_hostname
        if not self.verify:
            context.verify_mode = ssl.CERT_NONE
        if self.certificate_location:
            context.load_cert_chain(self.certificate_location, self.key_location, self.key_password)
        return context


#: librdkafka's spellings of false.
_FALSE = ("false", "f", "0", "no", "off")

# -- SCRAM (RFC 5802, RFC 7677) ---------------------------------------------------------------------

_SCRAM = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class Scram:
    """One SCRAM exchange as the client: :meth:`first`, :meth:`final`, :meth:`verify`."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self._hash = _SCRAM[mechanism]
        self._username, self._password = username, password
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self._first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode()
            fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
            nonce, iterations = fields.get("r", ""), int(fields.get("i", "0") or 0)
            salt = base64.b64decode(fields.get("s", ""), validate=True)
        except (UnicodeDecodeError, ValueError, binascii.Error):
            raise WireError("the broker's SCRAM challenge is malformed") from None
        well_formed = len(nonce) > len(self._nonce) and nonce.startswith(self._nonce) and salt and iterations > 0
        if not well_formed or text.startswith("m="):
            raise WireError("the broker's SCRAM challenge is malformed")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        if text.startswith("e="):
            raise WireError(f"the broker refused the SCRAM login: {text[2:]}")
        try:
            signature = base64.b64decode(text[2:], validate=True) if text.startswith("v=") else b""
        except (ValueError, binascii.Error):
            signature = b""
        if not signature or not hmac.compare_digest(signature, self._server_signature):
            raise WireError("the broker's SCRAM signature does not match: not the server the password is for")


# -- one connection --------------------------------------------------------------------------------


class Connection:
    """One broker connection (TLS and SASL login done); :meth:`request` sends and waits."""

    def __init__(self, host: str, port: int, settings: Settings, timeout: float) -> None:
        self.address = f"{host}:{port}"
        self._settings = settings
        self._timeout = timeout
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        #: The broker's node id, once a FindCoordinator answer named it (None: not known).
        self.node_id: int | None = None
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise WireError(f"cannot connect to {self.address}: {exc.strerror or exc}") from None
        try:
            if settings.tls:
                try:
                    sock = settings.tls_context().wrap_socket(sock, server_hostname=host)
                except (ssl.SSLError, OSError) as exc:
                    raise WireError(f"TLS handshake with {self.address} failed: {exc}") from None
            self._sock = sock
            if settings.sasl:
                self._login()
            self.versions = self._api_versions()
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    #: The cluster's finalized feature levels (``share.version``, ``metadata.version``...) as this
    #: broker's ApiVersions answered them (v3's tagged field 2); empty when it named none.
    finalized_features: dict[str, int]

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self, api_key: int, lowest: int, highest: int) -> int:
        """The highest version of ``api_key`` both sides speak within ``lowest``..``highest``."""
        offered = self.versions.get(api_key)
        if offered is None or offered[1] < lowest or offered[0] > highest:
            raise NotOffered(f"the broker at {self.address} does not offer API {api_key} version {lowest}..{highest}")
        return min(highest, offered[1])

    def request(
        self, api_key: int, version: int, body: bytes, *, flexible: bool, header_v0_response: bool = False
    ) -> Reader:
        """Send one request, read its response; the returned reader is past the response header."""
        self._correlation += 1
        header = Writer().int16(api_key).int16(version).int32(self._correlation).string(self._settings.client_id)
        if flexible:
            header.tags()
        payload = header.bytes() + body
        try:
            self._sock.settimeout(self._timeout)
            self._sock.sendall(struct.pack(">i", len(payload)) + payload)
            size = struct.unpack(">i", self._read(4))[0]
            if not 0 <= size <= MAX_RESPONSE:
                raise WireError(f"the broker at {self.address} answered a response of {size} bytes")
            reader = Reader(self._read(size))
        except (OSError, struct.error) as exc:
            raise WireError(f"the connection to {self.address} failed: {exc}") from None
        if reader.int32() != self._correlation:
            raise WireError(f"the broker at {self.address} answered another request")
        if flexible and not header_v0_response:
            reader.skip_tags()
        return reader

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self._sock.recv(n - len(out))
            if not chunk:
                raise WireError(f"the broker at {self.address} closed the connection")
            out += chunk
        return bytes(out)

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        body = Writer().compact_string("safeconsumer").compact_string(__version__).tags().bytes()
        r = self.request(API_VERSIONS, 3, body, flexible=True, header_v0_response=True)
        code = r.int16()
        if code:
            raise KafkaProtocolError(code, f"the broker at {self.address} refused ApiVersions (error {code})")

        def one(x: Reader) -> tuple[int, int, int]:
            key, low, high = x.int16(), x.int16(), x.int16()
            x.skip_tags()
            return key, low, high

        versions = {key: (low, high) for key, low, high in r.compact_array(one)}
        r.int32()  # throttle
        self.finalized_features = _finalized_features(r)
        return versions

    def _login(self) -> None:
        settings = self._settings
        r = self.request(SASL_HANDSHAKE, 1, Writer().string(settings.mechanism).bytes(), flexible=False)
        code = r.int16()
        offered = r.array(lambda x: x.string() or "")
        if code:
            raise WireError(
                f"the broker at {self.address} does not take SASL {settings.mechanism} (it offers {', '.join(offered)})"
            )
        if settings.mechanism == "PLAIN":
            self._authenticate(f"\0{settings.username}\0{settings.password}".encode())
            return
        scram = Scram(settings.mechanism, settings.username, settings.password)
        challenge = self._authenticate(scram.first())
        scram.verify(self._authenticate(scram.final(challenge)))

    def _authenticate(self, data: bytes) -> bytes:
        r = self.request(SASL_AUTHENTICATE, 2, Writer().compact_bytes(data).tags().bytes(), flexible=True)
        code, message = r.int16(), r.compact_string()
        answer = r.compact_bytes()
        if code:
            # The broker's message names the mechanism and user, never the password.
            raise WireError(f"authentication failed at {self.address}: {message or f'error {code}'}")
        return answer


def _finalized_features(r: Reader) -> dict[str, int]:
    """ApiVersions v3's tagged fields, of which tag 2 is FinalizedFeatures: (name, max level, min level)."""
    features: dict[str, int] = {}
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        if tag != 2:
            r.skip(size)
            continue

        def one(x: Reader) -> tuple[str, int]:
            name, level = x.compact_str(), x.int16()
            x.int16()  # min level
            x.skip_tags()
            return name, level

        features.update(r.compact_array(one))
    return features


def bootstrap(servers: str, settings: Settings, timeout: float) -> Connection:
    """A connection to the first of ``servers`` (``host:port,...``) that answers."""
    failures: list[str] = []
    for server in (s.strip() for s in servers.split(",") if s.strip()):
        host, _, port = server.rpartition(":")
        host = host.removeprefix("[").removesuffix("]") or "localhost"
        for prefix in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://"):
            host = host.removeprefix(prefix.lower()).removeprefix(prefix)
        try:
            return Connection(host, int(port), settings, timeout)
        except ValueError:
            failures.append(f"{server}: not host:port")
        except Unsupported:
            raise
        except WireError as exc:
            failures.append(str(exc))
    raise WireError("; ".join(failures) or "no bootstrap server given")


def find_coordinator(conn: Connection, group: str, settings: Settings, timeout: float) -> Connection:
    """A connection to ``group``'s coordinator (the group coordinator also serves share groups)."""
    deadline = time.monotonic() + timeout
    version = conn.version(FIND_COORDINATOR, 4, 6)
    while True:
        body = Writer().int8(0).compact_array([group], Writer.compact_string).tags().bytes()
        r = conn.request(FIND_COORDINATOR, version, body, flexible=True)
        r.int32()  # throttle
        coordinators = r.compact_array(_coordinator)
        if not coordinators:
            raise WireError(f"the broker at {conn.address} named no coordinator for group {group!r}")
        node, host, port, code, message = coordinators[0]
        if code == NONE:
            coordinator = (
                conn
                if f"{host}:{port}" == conn.address
                else Connection(host, port, settings, max(1.0, deadline - time.monotonic()))
            )
            coordinator.node_id = node
            return coordinator
        if code not in RETRIABLE or time.monotonic() > deadline:
            raise KafkaProtocolError(code, f"cannot find the coordinator of group {group!r}: {message or code}")
        time.sleep(0.2)


def _coordinator(r: Reader) -> tuple[int, str, int, int, str | None]:
    r.compact_str()  # key
    node, host, port = r.int32(), r.compact_str(), r.int32()
    code, message = r.int16(), r.compact_string()
    r.skip_tags()
    return node, host, port, code, message
