"""One process, one event loop: open the stores, serve HTTP and gRPC, stop on SIGTERM/SIGINT.

On shutdown every NDJSON stream is told (``lost``, reason ``service-stopping``) and its lock
released; then the listeners close and requests in flight finish (those still waiting for a lock
are cancelled, which withdraws them). Alpha1 leases and plain alpha2 locks are left in the store to
run out their time, as in Dapr's own stores: their apps have no channel to hear that the lock is
gone.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from typing import TextIO

from aiohttp import web

from prioritylock.server._alpha1 import Alpha1Locks
from prioritylock.server._alpha2 import Alpha2Locks
from prioritylock.server._config import ServeConfig, public_url
from prioritylock.server._grpc import make_server
from prioritylock.server._http import make_app
from prioritylock.server._http2 import add_alpha2_routes
from prioritylock.server._metrics import CountingStore, Metrics
from prioritylock.stores import ObjectStore, open_store

__all__ = ["run", "serve"]

log = logging.getLogger("prioritylock.server")


def run(config: ServeConfig, out: TextIO = sys.stdout) -> int:
    """Serve until SIGTERM or SIGINT; return the exit code (0).

    :raises ConfigError: a store URL is invalid.
    :raises OSError: a port could not be bound.
    """
    stores = {name: open_store(url) for name, url in config.stores.items()}
    _tune_gc()
    asyncio.run(serve(config, stores, out))
    return 0


async def serve(
    config: ServeConfig,
    stores: dict[str, ObjectStore],
    out: TextIO,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve ``stores`` until ``stop`` is set (or SIGTERM / SIGINT arrives)."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    ready = False
    metrics = Metrics()  # GET /metrics: every request to the stores is counted there
    stores = {name: CountingStore(store, name, metrics) for name, store in stores.items()}
    locks = Alpha1Locks(stores, config.app_id, key_prefixes=config.key_prefixes, metrics=metrics)
    streams = Alpha2Locks(locks.names, metrics=metrics)
    app = make_app(locks, ready=lambda: ready, api_token=config.api_token, max_body=config.max_body)
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
    try:
        site = web.TCPSite(runner, config.host, config.http_port)
        await site.start()
        http_port = _port(runner, config.http_port)
        grpc_port = None
        if config.grpc_port is not None:
            grpc_server, grpc_port = make_server(
                locks,
                host=config.host,
                port=config.grpc_port,
                api_token=config.api_token,
                max_body=config.max_body,
            )
            await grpc_server.start()
        ready = True
        named = ", ".join(f"{name}={public_url(url)}" for name, url in config.stores.items())
        grpc_text = "off" if grpc_port is None else f"{config.host}:{grpc_port}"
        print(
            f"prioritylock serve: ready; app {config.app_id}; HTTP {config.host}:{http_port}; "
            f"gRPC {grpc_text}; stores {named}",
            file=out,
            flush=True,
        )
        await stop.wait()
        log.info(
            "prioritylock serve: stopping; stream locks are released, other leases run out "
            "their time in the stores"
        )
    finally:
        ready = False
        await streams.shutdown()
        streams.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        if grpc_server is not None:
            await grpc_server.stop(grace=5)
        await runner.cleanup()


def _tune_gc() -> None:
    """The service owns its process, and holds many long-lived objects (a lock object, a task and
    a connection per stream): collect young objects less often, so that fewer of them are
    promoted and the full collections, whose length grows with every live object, come rarely.
    Measured with 10,000 streams: renewals at most 68-79 ms late with these, 101-376 ms with
    Python's defaults (docs/decisions/004-service-gc-tuning.md)."""
    gc.freeze()  # what was loaded at startup is never garbage
    gc.set_threshold(50_000, 20, 20)


def _port(runner: web.AppRunner, asked: int) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return asked
