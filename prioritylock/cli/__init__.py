"""The ``prioritylock`` command: look at, run under, override and free locks from a shell.

::

    prioritylock info URL PATH                       who holds the lock, on what terms
    prioritylock list URL [--prefix P]               every lock document under a prefix
    prioritylock run URL PATH [options] -- CMD ...   run CMD while holding the lock
    prioritylock override URL PATH --message MSG (--hold S | -- CMD ...)
    prioritylock force-unlock URL PATH --message MSG
    prioritylock watch URL PATH                      print each change of the lease
    prioritylock demo
    prioritylock serve --store NAME=URL --app-id ID  Dapr's lock API over HTTP and gRPC

Errors are one line on stderr and an exit code from :class:`Exit` (the CLI page of the docs has
the table); a traceback is shown only with ``PRIORITYLOCK_TRACEBACK=1``. Store URLs may carry
secrets in their query strings, so a URL is never printed, and ``CMD`` gets it without one.

Standard library only (argparse), and POSIX only for ``run`` and ``override -- CMD``: CMD runs in
a process group of its own, which gets the signals.

One module per concern: ``_parse`` (arguments), ``_output`` (human and ``--json`` output),
``_target`` (the store and the lock a command acts on), ``_inspect`` (info, list, watch),
``_supervise`` (run, override: CMD, signals, process groups), ``_admin`` (force-unlock),
``_serve`` (serve), and ``_main`` (dispatch and the error boundary).
"""

from __future__ import annotations

from prioritylock.cli._exits import EXIT_CODES, Exit
from prioritylock.cli._main import main

__all__ = ["EXIT_CODES", "Exit", "main"]
