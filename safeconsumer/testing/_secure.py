"""A secured listener for test brokers: SASL_SSL with SCRAM-SHA-512 over TLS.

Everything is made when the broker starts, in its work directory: a certificate authority, a
server certificate for 127.0.0.1 and ``localhost`` signed by it (``openssl``), the broker's
PKCS#12 keystore, and a SCRAM user with a random password. Clients reach the listener with
:meth:`SaslSsl.client_config`; the broker keeps a PLAINTEXT listener on 127.0.0.1 for its own
traffic and for managing users (:meth:`SaslSsl.set_user`, :meth:`SaslSsl.delete_user`).

Secrets (the user's password, the keystore's) are never in a ``repr()`` and never logged.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from ._errors import BrokerStartError
from ._kit import kit_client, retry_until

#: The SASL mechanism of the secured listener.
MECHANISM = "SCRAM-SHA-512"

#: The user every secured broker starts with.
DEFAULT_USER = "safeconsumer"


def _openssl(*args: str, cwd: Path) -> None:
    tool = shutil.which("openssl")
    if tool is None:
        raise BrokerStartError("a SASL_SSL test broker needs openssl on PATH to make its certificates")
    proc = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        # openssl's own messages name files and subjects, never the passwords (given as files).
        raise BrokerStartError(f"openssl {args[0]} failed (exit {proc.returncode}): {proc.stderr[-1500:]}")


def make_ca(directory: Path, name: str = "safeconsumer test CA") -> tuple[Path, Path]:
    """A self-signed certificate authority: (key, certificate) PEM files in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = directory / "ca.key", directory / "ca.pem"
    _openssl("genrsa", "-out", key.name, "2048", cwd=directory)
    _openssl(
        "req", "-x509", "-new", "-key", key.name, "-sha256", "-days", "2", "-subj", f"/CN={name}",
        "-out", cert.name, cwd=directory,
    )  # fmt: skip
    return key, cert


@dataclass(frozen=True)
class TlsFiles:
    """The broker's TLS material."""

    ca_location: Path
    keystore: Path
    keystore_password: str = field(repr=False)


def make_tls(directory: Path) -> TlsFiles:
    """A CA, and a server certificate it signed for 127.0.0.1 and localhost, as a PKCS#12 keystore."""
    ca_key, ca_cert = make_ca(directory)
    password = secrets.token_urlsafe(18)
    pass_file = directory / "keystore.pass"
    pass_file.write_text(password)
    pass_file.chmod(0o600)
    (directory / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n"
    )
    _openssl("genrsa", "-out", "server.key", "2048", cwd=directory)
    _openssl("req", "-new", "-key", "server.key", "-subj", "/CN=localhost", "-out", "server.csr", cwd=directory)
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", ca_cert.name, "-CAkey", ca_key.name, "-CAcreateserial",
        "-days", "2", "-sha256", "-extfile", "san.ext", "-out", "server.pem", cwd=directory,
    )  # fmt: skip
    _openssl(
        "pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key", "-certfile", ca_cert.name,
        "-name", "localhost", "-passout", f"file:{pass_file.name}", "-out", "server.p12", cwd=directory,
    )  # fmt: skip
    return TlsFiles(ca_cert, directory / "server.p12", password)


def listener_settings(port: int, tls: TlsFiles) -> dict[str, str]:
    """The broker settings of a SASL_SSL listener on ``127.0.0.1:port`` (added to a node's layout)."""
    return {
        "sasl.enabled.mechanisms": MECHANISM,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "listener.name.sasl_ssl.ssl.keystore.type": "PKCS12",
        "listener.name.sasl_ssl.ssl.keystore.location": str(tls.keystore),
        "listener.name.sasl_ssl.ssl.keystore.password": tls.keystore_password,
        "listener.name.sasl_ssl.ssl.client.auth": "none",
    }


def add_listener(node: dict[str, str], port: int) -> dict[str, str]:
    """``node``'s layout with a SASL_SSL listener on ``127.0.0.1:port`` too."""
    return {
        **node,
        "listeners": f"{node['listeners']},SASL_SSL://127.0.0.1:{port}",
        "advertised.listeners": f"{node['advertised.listeners']},SASL_SSL://127.0.0.1:{port}",
        "listener.security.protocol.map": f"{node['listener.security.protocol.map']},SASL_SSL:SASL_SSL",
    }


@dataclass(frozen=True)
class SaslSsl:
    """How to reach a test broker's SASL_SSL listener (``start_broker(security="sasl_ssl")``).

    ``bootstrap_servers`` is the secured listener's address (also the :class:`Broker`'s);
    ``admin_bootstrap_servers`` the broker's own PLAINTEXT listener, used here to manage users.
    """

    bootstrap_servers: str
    admin_bootstrap_servers: str
    ca_location: str
    username: str
    password: str = field(repr=False)
    mechanism: str = MECHANISM

    def client_config(self, *, username: str | None = None, password: str | None = None) -> dict[str, Any]:
        """librdkafka settings for a client of the secured listener (``bootstrap.servers`` included);
        another user's credentials with ``username``/``password``."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": self.mechanism,
            "sasl.username": self.username if username is None else username,
            "sasl.password": self.password if password is None else password,
            "ssl.ca.location": self.ca_location,
        }

    def _admin(self) -> AdminClient:
        return AdminClient(kit_client({"bootstrap.servers": self.admin_bootstrap_servers}))

    def set_user(self, username: str, password: str, *, timeout: float = 30.0) -> None:
        """Create ``username`` (or change its password); return once the secured listener accepts it."""
        credential = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        upsert = UserScramCredentialUpsertion(username, credential, password.encode())
        admin = self._admin()  # kept until the answer: a dropped client fails its futures
        for future in admin.alter_user_scram_credentials([upsert], request_timeout=timeout).values():
            future.result(timeout=timeout)
        # KRaft spreads the credential through its metadata log: wait until a login with it works.
        conf = {**self.client_config(username=username, password=password), "socket.connection.setup.timeout.ms": 5000}

        def accepted() -> bool:
            return bool(AdminClient(kit_client(conf)).list_topics(timeout=5).brokers)

        if not retry_until(
            accepted, timeout=timeout, retry_on=lambda exc: isinstance(exc, KafkaException), first=0.1, cap=1.0
        ):
            raise BrokerStartError(f"the SASL_SSL listener at {self.bootstrap_servers} never accepted {username!r}")

    def delete_user(self, username: str, *, timeout: float = 30.0) -> None:
        """Delete ``username``'s SCRAM credential: its next login (or re-authentication) is refused."""
        deletion = UserScramCredentialDeletion(username, ScramMechanism.SCRAM_SHA_512)
        admin = self._admin()
        for future in admin.alter_user_scram_credentials([deletion], request_timeout=timeout).values():
            future.result(timeout=timeout)
