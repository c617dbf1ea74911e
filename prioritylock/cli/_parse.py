"""The command line: argparse with one-line usage errors, and ``--`` before CMD."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from collections.abc import Iterator
from typing import NoReturn

from prioritylock import __version__
from prioritylock._config import DEFAULT_MAX_CLOCK_DRIFT
from prioritylock._errors import ConfigError
from prioritylock.cli._exits import EXIT_CODES, Exit, Failure
from prioritylock.cli._hudi import add_hudi_commands
from prioritylock.cli._output import PROG

__all__ = ["STORE_TIMEOUT", "build_parser", "flag_names", "split_command"]

#: The default of --store-timeout, in seconds.
STORE_TIMEOUT = 10.0


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and the code is ours)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog[len(PROG) :].strip()
        where = f"{command}: " if command else ""
        raise Failure(Exit.USAGE, f"{where}{message} (see {self.prog} --help)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0: {text!r}")
    return value


#: The shortest --interval of watch: a shorter one would only spin a core and the store's bill.
MIN_INTERVAL = 0.01


def _interval(text: str) -> float:
    value = _seconds(text)
    if value < MIN_INTERVAL:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_INTERVAL:g} s: {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _fence(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a fence, 0 or more: {text!r}")
    return value


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def build_parser() -> Parser:
    """The parser of every command."""
    epilog = "exit codes:\n" + "\n".join(f"  {code:<8} {text}" for code, text in EXIT_CODES)
    parser = Parser(
        prog=PROG,
        description="Distributed locks with priorities and preemption, leased in object stores.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    # The global options are taken before or after the command: on the root parser, and again
    # on each command's with SUPPRESS, so that a value given after the command wins and one
    # given before it is not overwritten by the command's default (main fills in the default).
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--store-timeout",
        type=_seconds,
        default=argparse.SUPPRESS,
        metavar="S",
        help=f"how long one store call is retried on throttling or 5xx (default {STORE_TIMEOUT:g})",
    )

    common = Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    common.add_argument(
        "--store-timeout",
        type=_seconds,
        default=argparse.SUPPRESS,
        metavar="S",
        help=f"how long one store call is retried on throttling or 5xx (default {STORE_TIMEOUT:g})",
    )
    located = Parser(add_help=False, parents=[common])
    located.add_argument("url", metavar="URL", help="store URL: file:///DIR, s3://BUCKET/PREFIX…")
    located.add_argument(
        "path", metavar="PATH", help="lock path (jobs/nightly) or scope key (v1/resource/prod/db)"
    )

    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    commands.add_parser(
        "info",
        parents=[located],
        help="who holds the lock, on what terms",
        description=(
            "Show the lease: holder, message, priority, timeouts, fence, time left, pending "
            "request and the last event."
        ),
    )

    lister = commands.add_parser(
        "list",
        parents=[common],
        help="every lock document under a prefix",
        description="List every lock document under a key prefix: one line each, or a JSON array.",
    )
    lister.add_argument("url", metavar="URL", help="store URL")
    lister.add_argument(
        "--prefix",
        default="",
        help="key prefix (v1/resource/prod/) or lock path prefix (jobs/ means v1/path/jobs/)",
    )

    runner = commands.add_parser(
        "run",
        parents=[located],
        help="run CMD while holding the lock",
        usage=f"{PROG} run [options] URL PATH -- CMD [ARGS ...]",
        description=(
            "Wait for the lock, run CMD while holding it (the lease is renewed), release it when "
            "CMD exits and exit with CMD's status. CMD gets PRIORITYLOCK_FENCE, PRIORITYLOCK_PATH, "
            "PRIORITYLOCK_KEY, PRIORITYLOCK_OWNER and PRIORITYLOCK_URL (without query string). "
            "Preempted, CMD's process group gets SIGTERM and the cleanup window, then SIGKILL."
        ),
    )
    runner.add_argument("--priority", type=_integer, default=0, help="0..2147483646 (default 0)")
    _add_timing(runner)
    runner.add_argument(
        "--wait", type=_seconds, metavar="S", help="as requestor, wait S for the holder's cleanup"
    )
    runner.add_argument(
        "--forceful", action="store_true", help="take the lock when the --wait runs out"
    )
    runner.add_argument(
        "--timeout", type=_seconds, metavar="S", help="give up after S (exit 6; default: wait)"
    )
    runner.add_argument("--owner", help="name shown to others (default user@host:pid)")
    runner.add_argument("--message", help="why this lock is held, shown to others")
    runner.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="say nothing while waiting (by default: a status line on a terminal, else a line "
        "on stderr when the wait starts and one when the lock is taken)",
    )

    override = commands.add_parser(
        "override",
        parents=[located],
        help="the operators' emergency override",
        usage=f"{PROG} override [options] URL PATH --message MSG (--hold S | -- CMD [ARGS ...])",
        description=(
            "Take the lock at once from any holder (priority 2147483647, recorded with MSG and "
            "user@host), then hold it for S seconds or run CMD like `run`. With --fence and/or "
            "--owner, only while the lease still shows them; without, confirm at the prompt (or "
            "--yes when not on a terminal)."
        ),
    )
    override.add_argument("--message", required=True, help="why (required; recorded)")
    override.add_argument("--hold", type=_seconds, metavar="S", help="hold for S, then release")
    _add_guards(override, "take it")
    _add_timing(override)

    force = commands.add_parser(
        "force-unlock",
        parents=[located],
        help="free a lock held by a dead client",
        description=(
            "Free the lock whoever holds it; recorded with MSG and user@host. The next holder "
            "gets a higher fence. With --fence and/or --owner, only while the lease still shows "
            "them; without, confirm at the prompt (or --yes when not on a terminal)."
        ),
    )
    force.add_argument("--message", required=True, help="why (required; recorded)")
    _add_guards(force, "free it")
    force.add_argument(
        "--overwrite-corrupt",
        action="store_true",
        help="also replace a corrupt lease document with a free one",
    )

    watch = commands.add_parser(
        "watch",
        parents=[located],
        help="print each change of the lease",
        description="Poll the lease and print each change until Ctrl-C (exit 0) or --count.",
    )
    watch.add_argument(
        "--interval",
        type=_interval,
        default=1.0,
        metavar="S",
        help=f"seconds between reads, at least {MIN_INTERVAL:g} (1)",
    )
    watch.add_argument("--count", type=_positive_int, metavar="N", help="stop after N changes")

    add_hudi_commands(commands, common, _seconds, _interval, Parser)

    commands.add_parser("demo", help="contention and preemption on a temporary local store")

    server = commands.add_parser(
        "serve",
        help="a lock service for other languages, speaking Dapr's lock API",
        usage=f"{PROG} serve (--store NAME=URL ... | --components DIR) --app-id ID [options]",
        description=(
            "Serve Dapr's alpha1 lock API (HTTP and gRPC) and the full lock API "
            "(/v1.0-alpha2: blocking locks, NDJSON streams, priorities) over the given stores "
            "until SIGTERM. Binds 127.0.0.1 unless --host says otherwise (beyond loopback only "
            "with DAPR_API_TOKEN set, or with --allow-no-token); --tls-cert and --tls-key serve "
            "both over TLS. With DAPR_API_TOKEN set, every request but the health checks must "
            "carry it (dapr-api-token); force "
            "unlocks and the emergency override need PRIORITYLOCK_OPERATOR_TOKEN "
            "(prioritylock-operator-token). Needs pip install 'prioritylock[server]'."
        ),
    )
    server.add_argument(
        "--store",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="a lock store the apps name in their calls (repeatable)",
    )
    server.add_argument(
        "--components",
        metavar="DIR",
        help="also the lock stores of the Dapr component files in DIR (type lock.prioritylock)",
    )
    # From the environment too: the container image's default command names no app id.
    app_id = os.environ.get("PRIORITYLOCK_APP_ID") or None
    server.add_argument(
        "--app-id",
        required=app_id is None,
        default=app_id,
        help="the app's id: the prefix of its keys, as in Dapr (default: PRIORITYLOCK_APP_ID)",
    )
    server.add_argument("--http-port", type=_port, default=3500, help="HTTP port (3500)")
    server.add_argument(
        "--grpc-port", type=_port, default=50001, help="gRPC port (50001; 0: no gRPC)"
    )
    server.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    server.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="PEM certificate (chain): serve HTTPS and gRPC over TLS (with --tls-key)",
    )
    server.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    server.add_argument(
        "--allow-no-token",
        action="store_true",
        help="listen beyond loopback without DAPR_API_TOKEN (refused otherwise: anyone who can "
        "reach the port could take and release locks)",
    )
    server.add_argument(
        "--ping-interval",
        type=_seconds,
        default=5.0,
        metavar="S",
        help="seconds between pings on an idle lock stream (5)",
    )
    server.add_argument(
        "--hint-address",
        metavar="ADDRESS[:PORT]",
        help="where the service hears hints from other hosts (UDP) and what its leases record: "
        "ADDRESS[:PORT], LISTEN=RECORD, or off (default: PRIORITYLOCK_HINTS, else 127.0.0.1)",
    )
    server.add_argument(
        "--no-store-check",
        dest="store_check",
        action="store_false",
        help="start even if a store does not answer its first read (refused otherwise, exit "
        "4); GET /v1.0/healthz/outbound then answers 500 until every store answers",
    )
    return parser


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return value


def _add_guards(parser: argparse.ArgumentParser, act: str) -> None:
    parser.add_argument(
        "--fence",
        type=_fence,
        metavar="N",
        help=f"{act} only while the lease still shows fence N (as 'info' showed it)",
    )
    parser.add_argument(
        "--owner", metavar="NAME", help=f"{act} only while NAME still holds the lock"
    )
    parser.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help=f"{act} whatever the lease shows, without asking (needed off a terminal "
        "unless --fence or --owner is given)",
    )


def _add_timing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lease", type=_seconds, metavar="S", help="lease timeout (default 30)")
    parser.add_argument(
        "--cleanup",
        type=_seconds,
        metavar="S",
        help="cleanup window when preempted, and the grace before SIGKILL (default 10)",
    )


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``run``/``override``: everything after the first ``--`` is CMD, never our options."""
    separator = "--"
    for index, word in enumerate(argv):
        if word == separator:
            return argv, None
        if not word.startswith("-"):
            if word not in ("run", "override") or separator not in argv[index:]:
                return argv, None
            cut = argv.index(separator, index)
            return argv[:cut], argv[cut + 1 :]
    return argv, None


# The builder names its options; the command line calls them by their flags.
_FLAGS = {
    "lease_timeout": "--lease",
    "cleanup_timeout": "--cleanup",
    "waiting_timeout": "--wait",
    "priority": "--priority",
    "owner": "--owner",
    "message": "--message",
    "store_timeout": "--store-timeout",
    "if_fence": "--fence",
    "if_owner": "--owner",
}


@contextlib.contextmanager
def flag_names() -> Iterator[None]:
    """Builder errors in the command line's words: ``ConfigError.option`` becomes its flag.

    An error about no one option, or about one the command line does not set, is left as it is.
    """
    try:
        yield
    except ConfigError as exc:
        if exc.option == "max_clock_drift":
            # The command line keeps the default drift allowance: a lease that short is at fault.
            raise ConfigError(
                f"--lease: must be longer than the clock drift allowance "
                f"({DEFAULT_MAX_CLOCK_DRIFT:g} s)",
                option="lease_timeout",
            ) from None
        flag = _FLAGS.get(exc.option or "")
        if flag is None:
            raise
        raise ConfigError(f"{flag}: {exc.problem}", option=exc.option) from None
