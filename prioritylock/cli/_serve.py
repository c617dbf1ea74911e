"""``serve``: start the lock service (``prioritylock.server``) from the command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from prioritylock._errors import ConfigError
from prioritylock.cli._exits import Exit, Failure
from prioritylock.cli._output import Output

__all__ = ["cmd_serve"]


def cmd_serve(args: argparse.Namespace, out: Output) -> int:
    try:
        from prioritylock.server._app import PortUnavailable, run
        from prioritylock.server._components import read_components
        from prioritylock.server._config import ServeConfig, parse_store
        from prioritylock.server._health import StoreCheckFailed
    except ImportError as exc:
        raise Failure(
            Exit.CONFIG,
            f"serve needs {exc.name or 'its dependencies'}: pip install 'prioritylock[server]'",
        ) from None
    stores: dict[str, str] = {}
    prefixes: dict[str, str | None] = {}

    def add(name: str, url: str) -> None:
        if name in stores:
            raise ConfigError(f"--store: {name!r} is given twice", option="store")
        stores[name] = url

    for text in args.store:
        add(*parse_store(text))
    if args.components is not None:
        for name, spec in read_components(Path(args.components), args.app_id).items():
            add(name, spec.url)
            prefixes[name] = spec.key_prefix
    if not stores:
        raise Failure(Exit.USAGE, "serve: give at least one --store NAME=URL or --components DIR")
    config = ServeConfig(
        stores=stores,
        app_id=args.app_id,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port or None,
        api_token=os.environ.get("DAPR_API_TOKEN") or None,
        operator_token=os.environ.get("PRIORITYLOCK_OPERATOR_TOKEN") or None,
        ping_interval=args.ping_interval,
        key_prefixes=prefixes,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        allow_no_token=args.allow_no_token,
        store_check=args.store_check,
    )
    if args.hint_address is not None:
        from prioritylock._hints import HINTS, parse_setting

        HINTS.configure(parse_setting(args.hint_address))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    try:
        return run(config)
    except PortUnavailable as exc:
        raise Failure(Exit.PORT_UNAVAILABLE, f"serve: {exc}") from None
    except StoreCheckFailed as exc:
        raise Failure(Exit.STORE, f"serve: {exc}", type=type(exc.error).__name__) from None
