"""``python -m prioritylock``: the ``prioritylock`` command (see :mod:`prioritylock._cli`)."""

import sys

from prioritylock._cli import main

if __name__ == "__main__":
    sys.exit(main())
