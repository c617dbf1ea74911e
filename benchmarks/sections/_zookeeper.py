"""``push``'s optional comparator (issue 21), ns, kazoo on Debian's ``zookeeper``: a child's ``set``
-> our ``DataWatch`` called (Helix hears requests so); its ``release()`` -> our ``acquire()``."""

import importlib.util
import logging
import multiprocessing as mp
import os
import queue
import shutil
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import _servers  # noqa: F401 (puts the checkout, and its tools/, on the path)

from tools.emulators import ServerProcess, free_port

JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's: its manifest names the other jars
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"  # standalone, from a config file
CONFIG = "dataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
QUIET = logging.Logger("kazoo", logging.ERROR)  # no warning per refused connect at startup


def _child(hosts: str, conn: Connection) -> None:
    """The other process: takes the lock, then requests (``set``); releases 20 ms into our wait."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts)
    zk.start(30)
    lock = zk.Lock("/bench/lock", "child")
    while (command := conn.recv()) is not None:
        lock.acquire(timeout=30) if command == "request" else time.sleep(0.02)
        conn.send(time.monotonic_ns())
        zk.set("/bench/request", b"9") if command == "request" else lock.release()
    zk.stop()


def zookeeper(rounds: int, work: Path) -> tuple[list[int], list[int]] | None:
    """``rounds`` of each, or None without ``java``, the server's jar or kazoo."""
    java, port = shutil.which("java"), free_port()
    if not (java and JAR.exists() and importlib.util.find_spec("kazoo")):
        return None
    from kazoo.client import KazooClient

    data, hosts = Path(tempfile.mkdtemp(prefix="zookeeper-", dir=work)), f"127.0.0.1:{port}"
    (data / "zoo.cfg").write_text(CONFIG.format(data, port))  # on 127.0.0.1, no Jetty on :8080
    argv = [java, "-cp", str(JAR), MAIN, str(data / "zoo.cfg")]
    server = ServerProcess(
        "zookeeper", argv, env=os.environ, cwd=data, log_path=data / "log", die_with_parent=True
    )
    zk = KazooClient(hosts, 1, connection_retry={"max_tries": -1, "max_delay": 0.1}, logger=QUIET)
    told: queue.Queue[int] = queue.Queue()  # when our watch was called
    conn, child_conn = mp.Pipe()
    child = mp.get_context("spawn").Process(target=_child, args=(hosts, child_conn), daemon=True)
    try:  # a connect sent as the server starts may go unanswered: given up after 1 s, not 10
        zk.start(30)
        zk.ensure_path("/bench/request")
        zk.DataWatch("/bench/request", lambda *_: told.put(time.monotonic_ns()))
        told.get()  # called once as it is set
        child.start()
        requests, handoffs, lock = [], [], zk.Lock("/bench/lock", "parent")
        for _ in range(rounds):
            conn.send("request")
            requests.append(told.get(timeout=10) - conn.recv())
            conn.send("release")
            lock.acquire(timeout=30)
            handoffs.append(time.monotonic_ns() - conn.recv())
            lock.release()
        conn.send(None)
        child.join(10)
        return requests, handoffs
    finally:
        zk.stop()
        server.stop()
