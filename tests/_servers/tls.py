"""Redis, etcd and ZooKeeper serving TLS on 127.0.0.1, with certificates from a test CA.

Fixtures for the TLS tests (imported by ``tests/stores/conftest.py``). Each server starts once
per session, lazily, only when a test asks for it, and stops at session end; the processes are
:class:`tools.emulators.ServerProcess` (own process group, log file, SIGTERM then SIGKILL).

- :func:`test_ca`: a CA made for the session with ``cryptography`` (EC P-256, two days), and a
  certificate it signed for ``127.0.0.1`` and ``localhost`` (server and client use), as PEM files.
- ``redis_tls_server``: ``redis-server`` with ``--tls-port`` only (no plain port), a password.
- ``etcd_tls_server``: etcd with an ``https://`` client URL and its authentication enabled: user
  ``root`` and user ``app``, whose role may read and write keys under ``tls/`` only.
- ``zookeeper_tls_server``: ZooKeeper on Netty with a ``secureClientPort`` (its PEM key store
  holds the server's key and certificate); its plain port only answers the readiness probe.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import secrets
import shutil
import socket
import ssl
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tools import emulators

__all__ = [
    "ETCD_APP",
    "ETCD_ROOT",
    "TLSServer",
    "TestCA",
    "etcd_call",
    "etcd_tls_server",
    "make_test_ca",
    "redis_tls_server",
    "test_ca",
    "zookeeper_tls_server",
]

#: etcd's users on the TLS server: (name, password). ``app`` may use keys under ``tls/`` only.
ETCD_ROOT = ("root", "root-" + secrets.token_hex(6))
ETCD_APP = ("app", "app-" + secrets.token_hex(6))
_NETTY = ("codec", "handler", "buffer", "common", "transport", "resolver")
_NETTY_NATIVE = ("transport-native-unix-common", "transport-native-epoll")


@dataclass(frozen=True)
class TestCA:
    """A test CA's files (PEM): its certificate, and a key and certificate it signed for
    ``127.0.0.1`` / ``localhost``, usable by a server and by a client."""

    __test__ = False  # not a test class, whatever its name

    ca: Path
    cert: Path
    key: Path
    #: The key and the certificate in one file (ZooKeeper's PEM key store).
    key_and_cert: Path


def make_test_ca(directory: Path) -> TestCA:
    """Make a CA and a certificate it signed for 127.0.0.1 in ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def builder(subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey) -> Any:
        return (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        builder("prioritylock test CA", name("prioritylock test CA"), ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    where = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        builder("127.0.0.1", ca.subject, key)
        .add_extension(x509.SubjectAlternativeName(where), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    found = TestCA(
        directory / "ca.pem", directory / "cert.pem", directory / "key.pem", directory / "both.pem"
    )
    found.ca.write_bytes(ca.public_bytes(pem))
    found.cert.write_bytes(cert.public_bytes(pem))
    found.key.write_bytes(key_pem)
    found.key_and_cert.write_bytes(key_pem + cert.public_bytes(pem))
    return found


@dataclass(frozen=True)
class TLSServer:
    """A server speaking TLS on ``127.0.0.1:port``, its certificate signed by ``ca``."""

    port: int
    ca: TestCA
    secret: str  # Redis: its password; else unused
    process: emulators.ServerProcess

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


def _started(
    name: str, work: Path, launch: Callable[[Path], tuple[list[str], Callable[[], bool]]]
) -> emulators.ServerProcess:
    """Start a server by ``launch(attempt_dir)`` (its argv and readiness probe, on fresh ports),
    again if it exits during startup (a lost port race); fail the test if it never answers."""
    for attempt in range(emulators.START_ATTEMPTS):
        directory = work / f"{name}-{attempt}-{uuid.uuid4().hex[:6]}"
        directory.mkdir()
        argv, probe = launch(directory)
        process = emulators.ServerProcess(
            name, argv, env=emulators._server_env(), cwd=directory, log_path=work / f"{name}.log"
        )
        began = time.monotonic()
        while process.process.poll() is None:
            if probe():
                return process
            if time.monotonic() - began > emulators.START_DEADLINE:
                break
            time.sleep(0.05)  # a bounded poll of a process we don't control
        process.stop()
        if process.process.returncode not in (None, 0) and attempt + 1 < emulators.START_ATTEMPTS:
            continue
        break
    pytest.fail(f"{name} did not start:\n{process.tail()}", pytrace=False)


def _binary(name: str, install: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: run scripts/install-{install}", pytrace=False)
    return found


def _client_context(ca: TestCA) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca.ca))


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    """A CA for the session and a certificate it signed for 127.0.0.1."""
    return make_test_ca(tmp_path_factory.mktemp("test-ca"))


# -- Redis ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_tls_server(
    tmp_path_factory: pytest.TempPathFactory, test_ca: TestCA
) -> Iterator[TLSServer]:
    """redis-server on a TLS port only (clients need not show a certificate), with a password."""
    binary = _binary("redis-server", "redis")
    password = secrets.token_urlsafe(16)
    port = 0

    def launch(directory: Path) -> tuple[list[str], Callable[[], bool]]:
        nonlocal port
        port = emulators.free_port()
        argv = [
            binary,
            *("--bind", "127.0.0.1", "--port", "0", "--tls-port", str(port)),
            *("--tls-cert-file", str(test_ca.cert), "--tls-key-file", str(test_ca.key)),
            *("--tls-ca-cert-file", str(test_ca.ca), "--tls-auth-clients", "no"),
            *("--dir", str(directory), "--appendonly", "yes", "--appendfsync", "always"),
            *("--save", "", "--requirepass", password, "--daemonize", "no"),
            *("--logfile", "", "--loglevel", "warning"),
        ]
        return argv, lambda: emulators.redis_ping(port, password, _client_context(test_ca))

    process = _started("redis-tls", tmp_path_factory.mktemp("redis-tls"), launch)
    try:
        yield TLSServer(port, test_ca, password, process)
    finally:
        process.stop()


# -- etcd ----------------------------------------------------------------------------------------


def etcd_call(
    port: int, ca: TestCA, path: str, body: Mapping[str, object], token: str = ""
) -> dict[str, Any]:
    """One request to the TLS etcd's gateway (no store code involved); its JSON answer."""
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": token} if token else {},
        method="POST",
    )
    with _opener(ca).open(request, timeout=10) as answer:
        found: dict[str, Any] = json.loads(answer.read())
        return found


def _etcd_tls_ok(port: int, ca: TestCA) -> bool:
    try:
        with _opener(ca).open(f"https://127.0.0.1:{port}/health", timeout=1.0) as answer:
            return bool(json.loads(answer.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def _opener(ca: TestCA) -> urllib.request.OpenerDirector:
    """HTTPS trusting ``ca``, and no proxy from the environment."""
    https = urllib.request.HTTPSHandler(context=_client_context(ca))
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), https)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="session")
def etcd_tls_server(
    tmp_path_factory: pytest.TempPathFactory, test_ca: TestCA
) -> Iterator[TLSServer]:
    """etcd on https, its authentication on: :data:`ETCD_APP` may use keys under ``tls/``."""
    binary = _binary("etcd", "etcd")
    port = 0

    def launch(directory: Path) -> tuple[list[str], Callable[[], bool]]:
        nonlocal port
        port, peer = emulators.free_port(), emulators.free_port()
        client_url, peer_url = f"https://127.0.0.1:{port}", f"http://127.0.0.1:{peer}"
        argv = [
            binary,
            *("--name", "tls", "--data-dir", str(directory / "data")),
            *("--listen-client-urls", client_url, "--advertise-client-urls", client_url),
            *("--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url),
            *("--initial-cluster", f"tls={peer_url}", "--log-level", "warn"),
            *("--cert-file", str(test_ca.cert), "--key-file", str(test_ca.key)),
        ]
        return argv, lambda: _etcd_tls_ok(port, test_ca)

    process = _started("etcd-tls", tmp_path_factory.mktemp("etcd-tls"), launch)
    try:
        for user, password in (ETCD_ROOT, ETCD_APP):
            etcd_call(port, test_ca, "/v3/auth/user/add", {"name": user, "password": password})
            etcd_call(port, test_ca, "/v3/auth/role/add", {"name": user})
            etcd_call(port, test_ca, "/v3/auth/user/grant", {"user": user, "role": user})
        perm = {"key": _b64("tls/"), "range_end": _b64("tls0"), "permType": "READWRITE"}
        etcd_call(port, test_ca, "/v3/auth/role/grant", {"name": "app", "perm": perm})
        etcd_call(port, test_ca, "/v3/auth/enable", {})
        yield TLSServer(port, test_ca, "", process)
    finally:
        process.stop()


# -- ZooKeeper -----------------------------------------------------------------------------------

_ZOOKEEPER_TLS_CONFIG = (
    "dataDir={data}\nclientPort={plain}\nclientPortAddress=127.0.0.1\n"
    "secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\ntickTime=500\n"
    "admin.enableServer=false\n4lw.commands.whitelist=srvr\nforceSync=no\n"
    "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
    "ssl.keyStore.location={keystore}\nssl.keyStore.type=PEM\n"
    "ssl.trustStore.location={ca}\nssl.trustStore.type=PEM\nssl.clientAuth=none\n"
)


@pytest.fixture(scope="session")
def zookeeper_tls_server(
    tmp_path_factory: pytest.TempPathFactory, test_ca: TestCA
) -> Iterator[TLSServer]:
    """ZooKeeper with a TLS client port (Netty, Debian's netty jars on the class path)."""
    java = _binary("java", "zookeeper")
    if not emulators.ZOOKEEPER_JAR.exists():
        pytest.fail("ZooKeeper is not installed: run scripts/install-zookeeper", pytrace=False)
    jars = [emulators.ZOOKEEPER_JAR]
    jars += [Path(f"/usr/share/java/netty-{name}.jar") for name in (*_NETTY, *_NETTY_NATIVE)]
    port = 0

    def launch(directory: Path) -> tuple[list[str], Callable[[], bool]]:
        nonlocal port
        port, plain = emulators.free_port(), emulators.free_port()
        config = directory / "zoo.cfg"
        config.write_text(
            _ZOOKEEPER_TLS_CONFIG.format(
                data=directory,
                plain=plain,
                port=port,
                keystore=test_ca.key_and_cert,
                ca=test_ca.ca,
            )
        )
        jvm = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]
        classpath = ":".join(str(jar) for jar in jars)
        main = "org.apache.zookeeper.server.ZooKeeperServerMain"
        return [java, *jvm, "-cp", classpath, main, str(config)], lambda: _zk_ready(plain, port)

    process = _started("zookeeper-tls", tmp_path_factory.mktemp("zookeeper-tls"), launch)
    try:
        yield TLSServer(port, test_ca, "", process)
    finally:
        process.stop()


def _zk_ready(plain: int, secure: int) -> bool:
    """Serving (its plain port answers ``srvr``) and its TLS port listening."""
    if not emulators._zookeeper_ok(plain):
        return False
    try:
        socket.create_connection(("127.0.0.1", secure), timeout=1.0).close()
    except OSError:
        return False
    return True
