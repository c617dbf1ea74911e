"""``push``'s optional comparator (issue 21), ns, kazoo on Debian's ``zookeeper``: a child's ``set``
-> our ``DataWatch`` called (Helix hears requests so); its ``release()`` -> our ``acquire()``."""

import contextlib
import multiprocessing as mp
import queue
import time
from multiprocessing.connection import Connection
from pathlib import Path

import _servers


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
    """``rounds`` of each, or None without ZooKeeper (``java``, the server's jar) or kazoo."""
    with contextlib.ExitStack() as stack:
        try:
            from kazoo.client import KazooClient

            hosts = stack.enter_context(_servers.running(["zookeeper"], work))["zookeeper"].endpoint
        except (ImportError, _servers.EmulatorError):
            return None
        (zk := KazooClient(hosts)).start(30)
        stack.callback(zk.stop)
        told: queue.Queue[int] = queue.Queue()  # when our watch was called
        conn, child_conn = mp.Pipe()
        child = mp.get_context("spawn").Process(
            target=_child, args=(hosts, child_conn), daemon=True
        )
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
