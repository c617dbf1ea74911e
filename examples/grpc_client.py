"""A Python app takes its locks from ``prioritylock serve`` with ``prioritylock.client``: a batch
job holds a lock, an urgent job with a higher priority asks for it, and the batch job hands it
over when told. The store's credentials stay with the service.

Run the service, then the app:

    prioritylock serve --app-id reports --store 'lockstore=memory://demo' &
    python examples/grpc_client.py [STORE_NAME]      (default: lockstore)

``PRIORITYLOCK_GRPC`` is the service's gRPC address (default ``127.0.0.1:50001``), and
``DAPR_API_TOKEN`` its token, if it has one. Needs ``pip install 'prioritylock[client]'``.
"""

from __future__ import annotations

import os
import sys
import threading

from prioritylock import LockTimeout
from prioritylock.client import CleanupRequested, Client


def urgent(client: Client, store: str) -> None:
    # Priority 5 beats the batch job's 0: it is asked to hand over, within its cleanup timeout.
    with client.lock(store, "nightly-report", owner="urgent", priority=5, timeout=30) as held:
        print(f"urgent holds the lock, fence {held.fence}")


def main(store: str) -> None:
    target = os.environ.get("PRIORITYLOCK_GRPC", "127.0.0.1:50001")
    print(f"service: gRPC {target}, lock store {store!r}")
    asked = threading.Event()

    def on_cleanup(event: CleanupRequested) -> None:  # called on the stream's thread
        who = event.requestor
        print(f"batch: asked to hand over by {who.owner!r} (priority {who.priority})")
        asked.set()

    with Client(target, token=os.environ.get("DAPR_API_TOKEN")) as client:
        with client.lock(
            store, "nightly-report", owner="batch", cleanup_timeout=20,
            on_cleanup_requested=on_cleanup,
        ) as held:  # fmt: skip
            print(f"batch holds the lock, fence {held.fence}")
            try:
                with client.lock(store, "nightly-report", owner="other", timeout=0):
                    pass
            except LockTimeout:
                print("other: lock(timeout=0) -> LockTimeout while batch holds it")
            rival = threading.Thread(target=urgent, args=(client, store))
            rival.start()
            asked.wait(20)
            print("batch: rolled back its work, handing over")
        # Leaving the block ended the stream: the lock passed straight to the urgent job.
        rival.join()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lockstore")
