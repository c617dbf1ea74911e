"""A holder paused (SIGSTOP) past its lease in the middle of its work, on the local store and on
moto: after SIGCONT its write to the protected resource is refused by the fence, and it is told,
once, that it lost the lock.

The holder is a child process (``tests/_helpers/pause_holder.py``). It takes the lock, writes the
protected object once with its fence, then reads it again (believing it still holds the lock)
and is frozen right there: the classic stop-the-world pause between a check and a write. A
waiter in this process takes the lock over once the lease has expired and writes the protected
object with its own, higher fence. The holder is thawed and told to finish its write.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from prioritylock import ConditionFailed, Lock, LockBuilder
from prioritylock.stores import ObjectStore, replace_if_unchanged
from tests.conftest import selected_kinds

pytestmark = [pytest.mark.slow]

HELPER = Path(__file__).parent / "_helpers" / "pause_holder.py"
LOCK_PATH = "pause/holder"
PROTECTED = "pause/protected.json"
LEASE = 1.0
DRIFT = 0.2
POLL = 0.05


@dataclass
class Where:
    url: str  # for the child
    env: dict[str, str]
    store: ObjectStore  # the same namespace, for this process


@pytest.fixture(params=selected_kinds(["local", "s3-moto"]))
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Where]:
    env = dict(os.environ)
    if request.param == "local":
        directory = tmp_path / "store"
        store_factory = request.getfixturevalue("local_store_factory")
        yield Where(f"file://{directory}", env, store_factory())
        return
    server = request.getfixturevalue("moto_server")
    bucket = server.create_bucket()
    env.update(
        AWS_ACCESS_KEY_ID=server.access_key_id,
        AWS_SECRET_ACCESS_KEY=server.secret_access_key,
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
    )
    store = server.store(bucket)
    try:
        yield Where(
            f"s3://{bucket}/locks?endpoint={server.endpoint_url}&region={server.region}"
            "&addressing=path",
            env,
            store,
        )
    finally:
        store.close()
        server.remove_bucket(bucket)


class Child:
    """``pause_holder.py`` in a child process; its stdout lines on a queue."""

    def __init__(self, where: Where, stderr: Path) -> None:
        self.stderr = stderr
        with stderr.open("w", encoding="utf-8") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(HELPER),
                    where.url,
                    LOCK_PATH,
                    PROTECTED,
                    str(LEASE),
                    str(DRIFT),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=where.env,
            )
        self.lines: queue.Queue[list[str] | None] = queue.Queue()
        self.seen: list[list[str]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.split())
        self.lines.put(None)

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def wait_for(self, kind: str, timeout: float = 30) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            fields = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if fields is None:
                pytest.fail(f"the holder's output ended: {self.stderr.read_text('utf-8')}")
            self.seen.append(fields)
            if fields[0] == kind:
                return fields

    def finish(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        status = self.proc.wait(timeout=30)
        while (fields := self.lines.get(timeout=10)) is not None:
            self.seen.append(fields)
        return status

    def count(self, kind: str) -> int:
        return sum(1 for f in self.seen if f[0] == kind)


def _fenced_write(store: ObjectStore, fence: int) -> None:
    seen = store.read(PROTECTED)
    assert seen is not None and json.loads(seen.data)["fence"] < fence
    replace_if_unchanged(
        store, PROTECTED, json.dumps({"fence": fence, "by": "waiter"}).encode(), seen
    )


@pytest.mark.timeout(90)
def test_a_paused_holder_is_fenced_off_and_told_it_lost(where: Where, tmp_path: Path) -> None:
    child = Child(where, tmp_path / "holder-stderr.txt")
    waiter: Lock = (
        LockBuilder()
        .store(where.store)
        .path(LOCK_PATH)
        .owner("waiter")
        .lease_timeout(LEASE)
        .max_clock_drift(DRIFT)
        .poll_interval(POLL)
        .build()
    )
    took: list[float] = []
    failures: list[BaseException] = []

    def wait_for_lock() -> None:
        try:
            waiter.lock(timeout=30)
            took.append(time.monotonic())
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=wait_for_lock, daemon=True)
    try:
        holder_fence = int(child.wait_for("acquired")[1])
        child.send("read")
        assert child.wait_for("read")[1:] == ["1", "0"]
        child.send("write")
        assert child.wait_for("write")[1:] == ["written", "1"]
        thread.start()
        for _ in range(3):  # renewing, and the waiter, polling, does not take a live lease
            child.wait_for("renewed")
        assert not took and not failures
        child.send("read")
        assert child.wait_for("read")[1:] == ["1", str(holder_fence)]  # it believes it holds

        os.kill(child.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        thread.join(timeout=LEASE + DRIFT + 15)
        assert not failures, failures
        assert took, "the waiter never took the lock from the frozen holder"
        takeover_after = took[0] - stopped
        assert takeover_after >= LEASE, f"taken {takeover_after:.3f} s after the freeze"
        waiter_fence = waiter.fencing_token
        assert waiter_fence > holder_fence
        _fenced_write(where.store, waiter_fence)

        child.send("write")  # waiting in the pipe: read the moment the holder thaws
        os.kill(child.proc.pid, signal.SIGCONT)
        thawed = time.monotonic()
        _, result, owner = child.wait_for("write")
        assert owner == "0", "the thawed holder still believed it held the lock"
        assert result == "refused-by-fence", f"the thawed holder's write: {result}"
        lost = child.wait_for("lost") if child.count("lost") == 0 else None
        told_after = time.monotonic() - thawed
        assert child.finish() == 0, child.stderr.read_text("utf-8")
        assert child.count("lost") == 1, f"told {child.count('lost')} times: {child.seen}"
        reason = lost[1] if lost is not None else next(f[1] for f in child.seen if f[0] == "lost")
        assert reason == "expired", child.seen
        assert ["owner-at-exit", "0"] in child.seen
        assert ["unlock", "LockLost"] in child.seen

        # The waiter still holds the lock, and the resource keeps the waiter's write.
        assert waiter.is_current_owner()
        info = waiter.info()
        assert info is not None and info.held and info.owner == "waiter"
        assert info.fence == waiter_fence
        found = where.store.read(PROTECTED)
        assert found is not None and json.loads(found.data) == {
            "fence": waiter_fence,
            "by": "waiter",
        }
        print(
            f"\n[pause] took over {takeover_after:.2f} s after SIGSTOP (lease {LEASE:g} s, drift"
            f" {DRIFT:g} s); after SIGCONT the holder's write was {result} and it was told once"
            f" ({reason}), {told_after:.2f} s after SIGCONT at the latest;"
            f" fence {holder_fence} -> {waiter_fence}"
        )
    finally:
        if child.proc.poll() is None:
            os.kill(child.proc.pid, signal.SIGCONT)
            child.proc.kill()
            child.proc.wait()
        for stream in (child.proc.stdin, child.proc.stdout):
            if stream is not None:
                stream.close()
        waiter.close()


def test_conditional_write_alone_also_refuses_the_paused_holder() -> None:
    """The protected object's version check is the second line: a stale version never lands."""
    from prioritylock.stores import MemoryStore

    store = MemoryStore()
    replace_if_unchanged(store, "p", b'{"fence": 1}', None)
    stale = store.read("p")
    replace_if_unchanged(store, "p", b'{"fence": 2}', stale)
    with pytest.raises(ConditionFailed):
        replace_if_unchanged(store, "p", b'{"fence": 1, "again": true}', stale)
