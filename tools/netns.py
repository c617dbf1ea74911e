"""Two hosts on one machine, for the hint tests and the push benchmark: two Linux network
namespaces, each with an address of its own on one bridge, the store emulators reached over it.

The bridge lives in a third namespace (a switch), so the machine's firewall rules (a FORWARD
policy of DROP, as container runtimes set) never see the traffic between the hosts; this
namespace joins the bridge too, with the gateway address, where :meth:`Hosts.forward` relays TCP
to an emulator listening on 127.0.0.1. Needs root and iproute2 (:func:`unavailable` says why
not); everything made is removed on exit, and only addresses made here are used.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

__all__ = ["Hosts", "Loopback", "inside", "relay", "two_hosts", "unavailable"]

_CLONE_NEWNET = 0x40000000
_CHECKOUT = Path(__file__).resolve().parents[1]


def unavailable() -> str | None:
    """Why namespaces can't be made here (None: they can, as far as can be told unmade)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "making network namespaces needs iproute2 (ip netns)"
    return None


@contextlib.contextmanager
def inside(name: str | None) -> Iterator[None]:
    """This thread in the network namespace ``name`` for the block (None: where it is): the
    sockets it makes, the threads and processes it starts, live there (and stay)."""
    if name is None:
        yield
        return
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(os.open(f"/run/netns/{name}", os.O_RDONLY), close=True)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def _setns(fd: int, *, close: bool = False) -> None:
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
    finally:
        if close:
            os.close(fd)


class Loopback:
    """Where namespaces can't be made: two hosts as two loopback addresses of this one (the same
    face as :class:`Hosts`)."""

    names: tuple[str | None, str | None] = (None, None)
    addresses = ("127.0.0.2", "127.0.0.3")
    label = "two hosts (127.0.0.2, .3)"

    def expose(self, port: int) -> None:
        """Nothing to do: the emulators' ports are on this stack's loopback already."""


@contextlib.contextmanager
def two_hosts() -> Iterator[Hosts | Loopback]:
    """Two :class:`Hosts` for the block, or where they can't be made, :class:`Loopback`."""
    if unavailable() is not None:
        yield Loopback()
        return
    try:
        hosts = Hosts().__enter__()
    except OSError:
        yield Loopback()
        return
    try:
        yield hosts
    finally:
        hosts.__exit__(None, None, None)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class Hosts:
    """``with Hosts() as hosts:`` two namespaces ``hosts.names`` with ``hosts.addresses``, and
    ``hosts.gateway``, this namespace's address on their bridge. Run a command in host ``i``
    with ``[*hosts.wrap(i), ...]``.

    :raises OSError: a namespace or a link could not be made (the message says which command).
    """

    def __init__(self) -> None:
        tag = os.getpid() % 100_000
        # 198.18.0.0/15 is set aside for benchmarking (RFC 2544): no real network to shadow.
        net = f"198.{18 + (os.getpid() // 256) % 2}.{os.getpid() % 256}"
        self.names = [f"plh{tag}a", f"plh{tag}b"]
        self.addresses = [f"{net}.2", f"{net}.3"]
        self.gateway = f"{net}.1"
        self._switch = f"plh{tag}s"
        self.label = "two hosts (namespaces)"
        self._tag = tag
        self._opened: list[socket.socket] = []
        self._relays: list[subprocess.Popen[str]] = []

    def wrap(self, host: int) -> tuple[str, ...]:
        """The command prefix that runs a program in host ``host`` (0 or 1)."""
        return ("ip", "netns", "exec", self.names[host])

    def __enter__(self) -> Hosts:
        try:
            self._make()
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            self.__exit__(None, None, None)
            said = getattr(exc, "stderr", b"") or b""
            raise OSError(f"{' '.join(map(str, exc.cmd))}: {said.decode().strip()}") from None
        return self

    def _make(self) -> None:
        tag, switch = self._tag, self._switch
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        ends = [(name, address) for name, address in zip(self.names, self.addresses, strict=True)]
        for n, (name, address) in enumerate([*ends, (None, self.gateway)]):
            outer, inner = f"plh{tag}p{n}", f"plh{tag}h{n}"
            _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
            _ip("link", "set", outer, "netns", switch)
            _ip("-n", switch, "link", "set", outer, "master", "br0", "up")
            if name is not None:
                _ip("netns", "add", name)
                _ip("link", "set", inner, "netns", name)
                _ip("-n", name, "link", "set", "lo", "up")
            where = ("-n", name) if name is not None else ()
            _ip(*where, "addr", "add", f"{address}/24", "dev", inner)
            _ip(*where, "link", "set", inner, "up")

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        for sock in self._opened:
            sock.close()
        for process in self._relays:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.close()
            process.stdout.close()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        for name in [*self.names, self._switch]:  # a link goes with its namespace, and its peer
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                _ip("netns", "del", name)

    def forward(self, to: tuple[str, int], puts: list[int] | None = None) -> tuple[str, int]:
        """A TCP relay on the gateway to ``to`` (:func:`relay`): where the hosts reach it."""
        return self.gateway, relay((self.gateway, 0), to, self._opened, puts)

    def expose(self, port: int) -> None:
        """127.0.0.1:``port`` in each host leads, over the bridge, to 127.0.0.1:``port`` here
        (where the emulators listen): a store URL works unchanged in either host. The relays
        run in a process of their own (:func:`_expose`), off the caller's GIL."""
        args = [sys.executable, "-m", "tools.netns", str(port), self.gateway, *self.names]
        process = subprocess.Popen(
            args, cwd=_CHECKOUT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self._relays.append(process)
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise OSError(f"the relays of port {port} did not start")


def relay(
    listen: tuple[str, int],
    to: tuple[str, int],
    opened: list[socket.socket],
    puts: list[int] | None = None,
) -> int:
    """A TCP relay listening on ``listen`` to ``to`` (threads: for a few connections); returns
    its port. Every socket it opens goes in ``opened``, for the caller to close (which ends
    it). ``puts``: each time an HTTP response (not a ``100 Continue``) comes back for a ``PUT``
    sent through it, ``time.monotonic_ns()`` is appended (when a write landed, as the writer
    sees it)."""
    server = socket.create_server(listen)
    opened.append(server)
    threading.Thread(target=_accept, args=(server, to, opened, puts), daemon=True).start()
    port: int = server.getsockname()[1]
    return port


def _accept(
    server: socket.socket, to: tuple[str, int], opened: list[socket.socket], puts: list[int] | None
) -> None:
    with contextlib.suppress(OSError):
        while True:
            client, _ = server.accept()
            upstream = socket.create_connection(to)
            opened.extend((client, upstream))
            for sock in (client, upstream):  # pass each piece on at once, as it came: no Nagle
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            put = [False]  # the last request sent on this connection was a PUT
            for a, b, sent in ((client, upstream, True), (upstream, client, False)):
                args = (a, b, put if puts is not None else None, sent, puts)
                threading.Thread(target=_pump, args=args, daemon=True).start()


def _pump(
    a: socket.socket, b: socket.socket, put: list[bool] | None, sent: bool, puts: list[int] | None
) -> None:
    with contextlib.suppress(OSError):
        while data := a.recv(65536):
            if put is not None and puts is not None:
                if sent:
                    put[0] = data.startswith(b"PUT ")
                elif put[0] and data.startswith(b"HTTP/") and data[9:12] != b"100":
                    puts.append(time.monotonic_ns())
                    put[0] = False
            b.sendall(data)
    with contextlib.suppress(OSError):
        b.shutdown(socket.SHUT_WR)


def _expose(port: int, gateway: str, names: list[str]) -> None:
    """:meth:`Hosts.expose`'s relays, until stdin closes: the gateway's ``port`` to this
    namespace's 127.0.0.1, and each host's 127.0.0.1:``port`` to the gateway's."""
    opened: list[socket.socket] = []
    relay((gateway, port), ("127.0.0.1", port), opened)
    for name in names:
        with inside(name):  # the relay's threads, and so its upstream sockets, live there
            relay(("127.0.0.1", port), (gateway, port), opened)
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    _expose(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
