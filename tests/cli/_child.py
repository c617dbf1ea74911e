"""A CMD for the CLI tests: report, then wait for a signal or exit with a status.

Usage: ``python _child.py NAME MARKER_DIR (wait | exit N)``

Prints one line ``ready NAME fence=F pid=P path=… url=…`` (flushed) as soon as it runs. On SIGTERM
or SIGINT it writes ``MARKER_DIR/NAME.SIGNAME`` and exits 0; ``exit N`` exits with status N at
once; ``wait`` blocks until a signal comes; ``ignore`` ignores SIGTERM (so only SIGKILL ends it).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType


def main() -> int:
    name, marker_dir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        (marker_dir / f"{name}.{signal.Signals(signum).name}").write_text(str(os.getpid()))
        sys.exit(0)

    if mode == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    env = os.environ
    print(
        f"ready {name} fence={env.get('PRIORITYLOCK_FENCE')} pid={os.getpid()} "
        f"pgid={os.getpgid(0)} path={env.get('PRIORITYLOCK_PATH')} "
        f"url={env.get('PRIORITYLOCK_URL')}",
        flush=True,
    )
    if mode == "exit":
        return int(sys.argv[4])
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
