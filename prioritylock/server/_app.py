"""One process, one event loop: open and check the stores, serve HTTP and gRPC, stop on
SIGTERM/SIGINT.

On shutdown every NDJSON stream is told (``lost``, reason ``service-stopping``) and its lock
released; then the listeners close and requests in flight finish (those still waiting for a lock
are cancelled, which withdraws them). Alpha1 leases and plain alpha2 locks are left in the store to
run out their time, as in Dapr's own stores: their apps have no channel to hear that the lock is
gone.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

import grpc
from aiohttp import web

from prioritylock._collector import tune_collector
from prioritylock._errors import ConfigError
from prioritylock.server._alpha1 import Alpha1Locks
from prioritylock.server._alpha2 import Alpha2Locks
from prioritylock.server._config import ServeConfig, is_loopback, public_url
from prioritylock.server._grpc import GrpcServer, make_server
from prioritylock.server._health import StoreHealth, check_stores
from prioritylock.server._http import make_app
from prioritylock.server._http2 import add_alpha2_routes
from prioritylock.server._metrics import CountingStore, Metrics
from prioritylock.stores import ObjectStore, open_store

__all__ = ["PortUnavailable", "run", "serve"]

log = logging.getLogger("prioritylock.server")


class PortUnavailable(OSError):
    """A port could not be bound (in use, or the address is not this machine's); the message
    names the port and the option that chooses it."""

    def __init__(self, host: str, port: int, flag: str, why: str) -> None:
        if flag == "--host":
            hint = "give --host an address of this machine"
        else:
            hint = f"choose another port with {flag}" + (" (0: no gRPC)" if "grpc" in flag else "")
        super().__init__(f"can't listen on {host}:{port} ({why}); {hint}")
        self.port = port
        self.flag = flag


def run(config: ServeConfig, out: TextIO = sys.stdout) -> int:
    """Serve until SIGTERM or SIGINT; return the exit code (0).

    :raises ConfigError: a store URL is invalid, or the TLS files can't be loaded.
    :raises StoreCheckFailed: a store did not answer its read (unless ``config.store_check`` is
        off).
    :raises PortUnavailable: a port could not be bound.
    """
    _tls_context(config)  # the files are checked before any store is opened
    stores = {name: open_store(url) for name, url in config.stores.items()}
    if config.store_check:
        shown = {name: public_url(url) for name, url in config.stores.items()}
        check_stores(stores, shown)
    _tune_gc()
    asyncio.run(serve(config, stores, out))
    return 0


async def serve(
    config: ServeConfig,
    stores: dict[str, ObjectStore],
    out: TextIO,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve ``stores`` until ``stop`` is set (or SIGTERM / SIGINT arrives). Without
    ``config.store_check`` the stores are read until they answer, and the outbound health says
    whether they have."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    ready = False
    metrics = Metrics()  # GET /metrics: every request to the stores is counted there
    stores = {name: CountingStore(store, name, metrics) for name, store in stores.items()}
    health = StoreHealth(stores, checked=config.store_check)
    locks = Alpha1Locks(stores, config.app_id, key_prefixes=config.key_prefixes, metrics=metrics)
    streams = Alpha2Locks(locks.names, metrics=metrics)
    app = make_app(
        locks,
        ready=lambda: ready,
        outbound=lambda: ready and health.healthy,
        api_token=config.api_token,
        max_body=config.max_body,
    )
    add_alpha2_routes(
        app,
        streams,
        operator_token=config.operator_token,
        ping_interval=config.ping_interval,
        max_body=config.max_body,
    )
    # A request whose client has gone is cancelled: a waiting lock request then withdraws
    # (leaving nothing claimed) instead of taking a lock nobody will hear of.
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, handler_cancellation=True, shutdown_timeout=5
    )
    await runner.setup()
    grpc_server = None
    checking: asyncio.Task[None] | None = None
    try:
        site = web.TCPSite(runner, config.host, config.http_port, ssl_context=_tls_context(config))
        try:
            await site.start()
        except OSError as exc:
            raise _unavailable(config.host, config.http_port, "--http-port", exc) from None
        http_port = _port(runner, config.http_port)
        grpc_port = None
        if config.grpc_port is not None:
            grpc_server, grpc_port = _grpc_server(config, locks, streams)
            await grpc_server.start(serving=health.healthy)
        ready = True
        if not health.healthy:
            log.warning(
                "prioritylock serve: started without checking the stores (--no-store-check): "
                "GET /v1.0/healthz/outbound answers 500 until every store answers"
            )
            checking = asyncio.create_task(health.run(_serving(grpc_server)))
        named = ", ".join(f"{name}={public_url(url)}" for name, url in config.stores.items())
        grpc_text = "off" if grpc_port is None else f"{config.host}:{grpc_port}"
        tls = " over TLS" if config.tls else ""
        print(
            f"prioritylock serve: ready; app {config.app_id}; HTTP{tls} {config.host}:{http_port}; "
            f"gRPC{tls if grpc_port else ''} {grpc_text}; stores {named}",
            file=out,
            flush=True,
        )
        if not config.tls and not is_loopback(config.host):
            log.warning(
                "prioritylock serve: listening on %s without TLS: tokens and lock ids cross the "
                "network in clear (give --tls-cert and --tls-key)",
                config.host,
            )
        await stop.wait()
        log.info(
            "prioritylock serve: stopping; stream locks are released, other leases run out "
            "their time in the stores"
        )
    finally:
        ready = False
        if checking is not None:
            checking.cancel()
        await streams.shutdown()
        streams.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if grpc_server is not None:
            await grpc_server.stop(grace=5)
        await runner.cleanup()


def _serving(grpc_server: GrpcServer | None) -> Callable[[], Awaitable[None]]:
    """What to do once every store has answered: say so, in the log and over gRPC health."""

    async def healthy() -> None:
        log.info("prioritylock serve: every lock store answers")
        if grpc_server is not None:
            await grpc_server.set_serving(True)

    return healthy


def _tune_gc() -> None:
    """The service owns its process, and holds many long-lived objects (a lock object, a task and
    a connection per stream): what was loaded at startup is frozen, and young objects are
    collected less often (``_collector``). Measured with 10,000 streams: renewals at most
    68-79 ms late with these, 101-376 ms with Python's defaults
    (docs/decisions/004-service-gc-tuning.md)."""
    tune_collector()


def _tls_context(config: ServeConfig) -> ssl.SSLContext | None:
    """The server side of HTTPS, or None without --tls-cert.

    :raises ConfigError: the certificate or key can't be read or don't match.
    """
    if config.tls_cert is None or config.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"--tls-cert/--tls-key: can't load {config.tls_cert} with {config.tls_key}: "
            f"{getattr(exc, 'strerror', None) or exc}",
            option="tls_cert",
        ) from None
    return context


def _grpc_server(
    config: ServeConfig, locks: Alpha1Locks, streams: Alpha2Locks
) -> tuple[GrpcServer, int]:
    """The gRPC server on its port (over TLS with --tls-cert); a port in use is said before gRPC
    tries it, so that its own log line does not come first."""
    assert config.grpc_port is not None
    _check_free(config.host, config.grpc_port, "--grpc-port")
    credentials = None
    if config.tls_cert is not None and config.tls_key is not None:
        pair = (Path(config.tls_key).read_bytes(), Path(config.tls_cert).read_bytes())
        credentials = grpc.ssl_server_credentials([pair])
    try:
        return make_server(
            locks,
            host=f"[{config.host}]" if ":" in config.host else config.host,  # IPv6: [::1]:port
            port=config.grpc_port,
            api_token=config.api_token,
            max_body=config.max_body,
            streams=streams,
            operator_token=config.operator_token,
            ping_interval=config.ping_interval,
            credentials=credentials,
        )
    except RuntimeError:
        raise PortUnavailable(
            config.host, config.grpc_port, "--grpc-port", "gRPC could not bind it"
        ) from None


def _check_free(host: str, port: int, flag: str) -> None:
    """:raises PortUnavailable: ``port`` can't be bound on ``host`` now."""
    if port == 0:
        return
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise _unavailable(host, port, flag, exc) from None
    for family, kind, proto, _, address in found:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                probe.bind(address)
            except OSError as exc:
                raise _unavailable(host, port, flag, exc) from None


def _unavailable(host: str, port: int, flag: str, exc: OSError) -> PortUnavailable:
    if exc.errno == errno.EADDRINUSE:
        why = "address already in use"
    elif exc.errno == errno.EACCES:
        why = "permission denied: ports below 1024 need privileges"
    else:
        why = os.strerror(exc.errno).lower() if exc.errno else type(exc).__name__
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            flag = "--host"
    return PortUnavailable(host, port, flag, why)


def _port(runner: web.AppRunner, asked: int) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return asked
