"""``main``: parse, dispatch to a command, and turn every failure into one line and a code."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from prioritylock._errors import PriorityLockError
from prioritylock.cli._admin import cmd_force_unlock
from prioritylock.cli._exits import Exit, Failure, Interrupted, exit_code
from prioritylock.cli._hudi import cmd_hudi
from prioritylock.cli._inspect import cmd_info, cmd_list, cmd_watch
from prioritylock.cli._output import PROG, Output
from prioritylock.cli._parse import STORE_TIMEOUT, build_parser, split_command
from prioritylock.cli._serve import cmd_serve
from prioritylock.cli._supervise import cmd_override, cmd_run

__all__ = ["main"]

#: The commands that take no --store-timeout.
_STORELESS = frozenset({"demo", "serve"})


def _cmd_demo(args: argparse.Namespace, out: Output) -> int:
    from prioritylock import _demo

    return _demo.main([])


def _dispatch(args: argparse.Namespace, out: Output, cmd: list[str] | None) -> int:
    if args.command == "run":
        return cmd_run(args, out, cmd)
    if args.command == "override":
        return cmd_override(args, out, cmd)
    handlers: dict[str, Callable[[argparse.Namespace, Output], int]] = {
        "info": cmd_info,
        "list": cmd_list,
        "force-unlock": cmd_force_unlock,
        "watch": cmd_watch,
        "demo": _cmd_demo,
        "serve": cmd_serve,
        "hudi": cmd_hudi,
    }
    return handlers[args.command](args, out)


def _missing_separator(args: argparse.Namespace, extra: list[str], cmd: list[str] | None) -> None:
    """``run URL PATH make all``: say that ``--`` is missing rather than "unrecognized"."""
    if args.command not in ("run", "override") or cmd is not None or extra[0].startswith("-"):
        return
    raise Failure(
        Exit.USAGE,
        f"{args.command}: '--' is missing before the command {extra[0]!r}: "
        f"{PROG} {args.command} [options] URL PATH -- CMD [ARGS ...]",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    tokens, cmd = split_command(list(sys.argv[1:] if argv is None else argv))
    out = Output("--json" in tokens, sys.stdout, sys.stderr)
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(tokens)
        if extra:
            _missing_separator(args, extra, cmd)
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        out.json = bool(getattr(args, "json", False))
        if args.command is None:
            raise Failure(Exit.USAGE, f"choose a command (see {PROG} --help)")
        if args.command in _STORELESS:
            if hasattr(args, "store_timeout"):
                parser.error(f"--store-timeout: {args.command} does not call a store of its own")
        elif not hasattr(args, "store_timeout"):
            args.store_timeout = STORE_TIMEOUT
        return int(_dispatch(args, out, cmd))
    except Failure as failure:
        out.error(failure.code, failure.message, **failure.extra)
        return failure.code
    except PriorityLockError as exc:
        code = exit_code(exc)
        out.error(code, str(exc), type=type(exc).__name__)
        return code
    except Interrupted as exc:
        code = 128 + exc.signum
        out.error(code, f"interrupted by {signal.Signals(exc.signum).name}")
        return code
    except KeyboardInterrupt:
        out.error(Exit.INTERRUPTED, "interrupted")
        return Exit.INTERRUPTED
    except BrokenPipeError:
        # Output piped into a command that stopped reading (| head): not an error. Point stdout
        # at /dev/null so the flush at exit does not complain again.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return Exit.OK
    except Exception as exc:
        if os.environ.get("PRIORITYLOCK_TRACEBACK"):
            raise
        out.error(Exit.ERROR, f"unexpected error: {type(exc).__name__}: {exc}")
        return Exit.ERROR
