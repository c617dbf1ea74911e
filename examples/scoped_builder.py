"""Helix-style scopes and every builder option, and LockInfo as a client that doesn't hold it sees.

Shows: ``LockScope.cluster`` / ``.participant`` / ``.resource`` and the one store key each maps
to (and back, with ``LockScope.from_key``); a lock built on a resource scope with owner, message,
priority, the three timeouts, forcefulness and the watch interval; the frozen config the builder
made; and ``info()`` read by another client that does not hold the lock.

Run: ``python examples/scoped_builder.py [STORE_URL]`` (default: a fresh temporary directory).
"""

from __future__ import annotations

import sys
import tempfile

from prioritylock import LockBuilder
from scopes import LockScope


def run(url: str) -> None:
    for scope in (
        LockScope.cluster("prod"),
        LockScope.participant("prod", "host-17"),
        LockScope.resource("prod", "orders-db"),
    ):
        assert LockScope.from_key(scope.key) == scope  # every key maps back to its scope
        print(f"{scope!r:45} -> key {scope.key}")

    orders_db = LockScope.resource("prod", "orders-db")
    migration = (
        LockBuilder()
        .store(url)
        .scope(orders_db)
        .owner("migrator@host-3")
        .message("adding an index to orders")
        .priority(100)  # 0..2147483646; higher wins
        .lease_timeout(20)  # lives 20 s without a renewal
        .cleanup_timeout(5)  # as holder: 5 s to clean up when preempted
        .waiting_timeout(15)  # as requestor: waits up to 15 s for a holder's cleanup
        .forceful(False)  # when that wait runs out: give up, don't take it
        .watch_interval(1)  # as holder: read the lease every second to hear of requests
        .build()
    )
    cfg = migration.config  # frozen and validated; change a copy with attrs.evolve
    print(
        f"config: priority {cfg.priority}, lease {cfg.lease_timeout:g} s, "
        f"renew every {cfg.renew_interval:.3g} s, watch every {cfg.watch_interval:g} s, "
        f"cleanup {cfg.cleanup_timeout:g} s, waiting {cfg.waiting_timeout:g} s"
    )

    observer = LockBuilder().store(url).scope(orders_db).owner("dashboard").build()
    with migration:
        info = observer.info()  # one read; works for clients that don't hold the lock
        assert info is not None
        print(f"observer sees: held={info.held} by {info.owner!r} ({info.message!r})")
        print(
            f"  priority {info.priority}, fence {info.fence}, lease {info.lease_timeout:g} s, "
            f"cleanup {info.cleanup_timeout:g} s, forceful {info.forceful}"
        )
        assert info.renewed_at is not None and info.expires_at is not None
        print(f"  renewed at {info.renewed_at:.3f}, expires at {info.expires_at:.3f} (wall clock)")
        print(f"  last event {info.last_event!r} by {info.last_event_by!r}")
        print(f"  pending request: {info.requestor_owner}")
        print(f"observer is_current_owner() -> {observer.is_current_owner()}")
    migration.close()
    observer.close()


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="prioritylock-example-") as tmp:
        run(argv[1] if len(argv) > 1 else f"file://{tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
