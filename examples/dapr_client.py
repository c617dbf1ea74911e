"""A Dapr app, unchanged, takes its locks from ``prioritylock serve``.

Everything below is plain Dapr Python SDK code. ``DaprClient()`` finds its sidecar as in any Dapr
app: ``DAPR_HTTP_PORT`` (default 3500) for the health check it waits on, ``DAPR_GRPC_PORT``
(default 50001) for the lock calls; those defaults are also the service's.

Run the service beside the app, then the app:

    prioritylock serve --app-id orders --store 'lockstore=memory://demo' &
    python examples/dapr_client.py [STORE_NAME]      (default: lockstore)

On other ports, give the service ``--http-port`` and ``--grpc-port`` and the app
``DAPR_HTTP_PORT`` and ``DAPR_GRPC_PORT``. Needs ``pip install 'prioritylock[server]'``, which
brings the ``dapr`` SDK too.
"""

from __future__ import annotations

import os
import sys
import warnings

from dapr.clients import DaprClient

# The SDK warns on every lock call that Dapr's lock API is alpha; this app knows.
warnings.filterwarnings("ignore", message="The Distributed Lock API is an Alpha")


def main(store: str) -> None:
    port = os.environ.get("DAPR_GRPC_PORT", "50001")
    print(f"sidecar: gRPC port {port}, lock store {store!r}")
    with DaprClient() as client:  # waits until GET /v1.0/healthz/outbound answers
        # As a context manager, a successful try_lock is unlocked when the block ends.
        with client.try_lock(store, "order-1", "worker-a", expiry_in_seconds=30) as lock:
            print(f"worker-a try_lock -> {lock.success}")
            rival = client.try_lock(store, "order-1", "worker-b", expiry_in_seconds=30)
            print(f"worker-b try_lock while worker-a holds it -> {rival.success}")
            wrong = client.unlock(store, "order-1", "worker-b")
            print(f"worker-b unlock -> {wrong.status.name}")
        # The with-block unlocked it: the lock is free for worker-b.
        got = client.try_lock(store, "order-1", "worker-b", expiry_in_seconds=30)
        print(f"worker-b try_lock after worker-a's block -> {got.success}")
        done = client.unlock(store, "order-1", "worker-b")
        print(f"worker-b unlock -> {done.status.name}")
        again = client.unlock(store, "order-1", "worker-b")
        print(f"worker-b unlock again -> {again.status.name}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lockstore")
