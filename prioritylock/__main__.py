"""``python -m prioritylock``: the ``prioritylock`` command (see :mod:`prioritylock.cli`)."""

import sys

from prioritylock.cli import main

if __name__ == "__main__":
    sys.exit(main())
