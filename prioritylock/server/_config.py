"""What one ``prioritylock serve`` process serves: stores by name, ports, app id, token."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

import attrs

from prioritylock._errors import ConfigError

__all__ = ["MAX_BODY_BYTES", "ServeConfig", "is_loopback", "parse_store", "public_url"]

#: Largest request body accepted; a larger one is answered 413 without being read.
MAX_BODY_BYTES = 64 * 1024

_STORE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def parse_store(text: str) -> tuple[str, str]:
    """``NAME=URL`` -> (name, url).

    :raises ConfigError: no ``=``, an empty URL, or a name Dapr would not accept.
    """
    name, sep, url = text.partition("=")
    if not sep or not url:
        raise ConfigError(f"--store: expected NAME=URL, got {public_url(text)!r}", option="store")
    if not _STORE_NAME.fullmatch(name):
        raise ConfigError(
            f"--store: invalid store name {name!r} (letters, digits, '.', '_', '-')",
            option="store",
        )
    return name, url


def public_url(url: str) -> str:
    """``url`` without user info or query string: what may be logged (they may hold secrets)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


@attrs.frozen
class ServeConfig:
    """The validated options of ``prioritylock serve``."""

    stores: Mapping[str, str] = attrs.field(repr=False)
    app_id: str
    host: str = "127.0.0.1"
    http_port: int = 3500
    grpc_port: int | None = 50001
    api_token: str | None = attrs.field(default=None, repr=False)
    #: The operators' token: force unlocks and the emergency override need it (None: refused).
    operator_token: str | None = attrs.field(default=None, repr=False)
    #: Seconds between pings on an idle NDJSON stream.
    ping_interval: float = 5.0
    max_body: int = MAX_BODY_BYTES
    #: Per store, the key prefix when it is not the app id (None: no prefix).
    key_prefixes: Mapping[str, str | None] = attrs.field(factory=dict)
    #: PEM files of the certificate (chain) and its private key: HTTPS and gRPC over TLS.
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Serve beyond loopback without an API token (``--allow-no-token``): the operator's choice.
    allow_no_token: bool = False
    #: Read every store once before serving, and refuse to start if one fails
    #: (``--no-store-check`` turns it off: the outbound health then says when they answer).
    store_check: bool = True

    def __attrs_post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError(
                "--tls-cert and --tls-key: give both (the certificate and its private key)",
                option="tls_cert" if self.tls_cert is None else "tls_key",
            )
        if self.api_token is None and not self.allow_no_token and not is_loopback(self.host):
            # As Redis's protected mode: an open lock service on the network lets anyone take
            # and release locks (alpha1 releases by owner name alone).
            raise ConfigError(
                f"--host {self.host}: refusing to listen beyond this machine without an API "
                "token: anyone who can reach the port could take and release locks. Set "
                "DAPR_API_TOKEN (and give --tls-cert and --tls-key, so that it does not cross "
                "the network in clear), or pass --allow-no-token to serve without one",
                option="host",
            )

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (an unknown name is not)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    if host.lower() == "localhost":
        return True
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(found) and all(
        ipaddress.ip_address(str(address[4][0]).split("%")[0]).is_loopback for address in found
    )
