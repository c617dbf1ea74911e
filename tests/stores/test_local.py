"""LocalStore beyond the contract: other processes, killed writers, its layout and its errors.

Child processes come from a forkserver that preloads this module, so each one starts in
milliseconds; they report to the test through pipes and barriers, never through sleeps.
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import multiprocessing.context
import multiprocessing.synchronize
import os
import random
import shutil
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock.stores import LocalStore, Versioned, open_store

PROCESSES = 8
ROUNDS = 40
KILLS = 20
CRASH_KEYS = ("crash/doc", "crash/nested/doc")
CHILD_SECONDS = 60.0

# -- children (module level, so a forkserver child can find them) -----------------------------


def _race_worker(
    directory: str, index: int, barrier: multiprocessing.synchronize.Barrier, conn: Connection
) -> None:
    """Race ``ROUNDS`` creates, then ``ROUNDS`` compare-and-swaps, against the other workers.

    Sends ``("ok", creates, swaps)``: per round whether this worker won, and for swaps the
    version it read and the version it wrote; or ``("error", traceback)``.
    """
    try:
        store = LocalStore(directory)
        creates: list[bool] = []
        for round_ in range(ROUNDS):
            barrier.wait()
            try:
                store.create(f"race/create-{round_}", str(index).encode())
                creates.append(True)
            except ConditionFailed:
                creates.append(False)
        swaps: list[tuple[str, str | None]] = []
        for round_ in range(ROUNDS):
            barrier.wait()  # the previous round's swaps are done
            seen = store.read("race/cas")
            assert seen is not None
            barrier.wait()  # everyone has read before anyone swaps
            try:
                new = store.replace("race/cas", f"{round_}:{index}".encode(), seen.version)
                swaps.append((seen.version, new))
            except ConditionFailed:
                swaps.append((seen.version, None))
        conn.send(("ok", creates, swaps))
    except BaseException:
        barrier.abort()
        conn.send(("error", traceback.format_exc()))
        raise


def _payload(serial: int) -> bytes:
    """A large document that names itself: its serial repeated, 256 KiB to 1 MiB in all.

    Cheap to make, so the writer spends its time writing; any prefix of it, or a mix of two,
    differs from every payload.
    """
    repeats = 32 * 1024 + (serial * 7919) % (96 * 1024)
    return serial.to_bytes(8, "big") * repeats


def _check_payload(key: str, found: Versioned | None) -> None:
    if found is None:
        return
    serial = int.from_bytes(found.data[:8], "big")
    assert found.data == _payload(serial), (
        f"{key!r} holds {len(found.data)} bytes that are not a complete payload (torn write)"
    )


def _crash_writer(directory: str, first_serial: int, conn: Connection) -> None:
    """Create, replace and delete large documents until killed; one byte on ``conn`` per write."""
    store = LocalStore(directory)
    serial = first_serial
    while True:
        for key in CRASH_KEYS:
            serial += 1
            found = store.read(key)
            if found is None:
                store.create(key, _payload(serial))
            elif serial % 5 == 0:
                store.delete(key, found.version)
            else:
                store.replace(key, _payload(serial), found.version)
            conn.send_bytes(b".")


def _hold_lock(directory: str, key: str, conn: Connection) -> None:
    """Take ``key``'s write lock, say so, and keep it until killed (or the test hangs up)."""
    store = LocalStore(directory)
    with store._locked(key, "hold"), contextlib.suppress(EOFError):
        conn.send_bytes(b"locked")
        conn.recv_bytes()  # never comes: the test kills us


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mp_context() -> multiprocessing.context.ForkServerContext:
    """A forkserver that has imported this module once: children start in milliseconds."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


@pytest.fixture
def spawn(
    mp_context: multiprocessing.context.ForkServerContext,
) -> Iterator[Callable[..., multiprocessing.context.ForkServerProcess]]:
    """Start a child running ``target(*args)``; every child is killed at teardown."""
    started: list[multiprocessing.context.ForkServerProcess] = []

    def start(target: Callable[..., None], *args: Any) -> multiprocessing.context.ForkServerProcess:
        process = mp_context.Process(target=target, args=args, daemon=True)
        process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        if process.is_alive():
            process.kill()
        process.join(CHILD_SECONDS)
        process.close()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(directory: Path) -> LocalStore:
    return LocalStore(directory)


# -- other processes --------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_processes_racing_create_and_swap_have_one_winner_per_round(
    mp_context: multiprocessing.context.ForkServerContext,
    spawn: Callable[..., multiprocessing.context.ForkServerProcess],
    store: LocalStore,
    directory: Path,
) -> None:
    first = store.create("race/cas", b"start")
    barrier = mp_context.Barrier(PROCESSES, timeout=CHILD_SECONDS)
    readers = []
    for index in range(PROCESSES):
        reader, writer = mp_context.Pipe(duplex=False)
        spawn(_race_worker, str(directory), index, barrier, writer)
        writer.close()
        readers.append(reader)
    reports = []
    for index, reader in enumerate(readers):
        assert reader.poll(CHILD_SECONDS), f"worker {index} sent no report"
        status, *body = reader.recv()
        assert status == "ok", f"worker {index} failed:\n{body[0]}"
        reports.append(body)

    for round_ in range(ROUNDS):
        winners = [i for i, (creates, _) in enumerate(reports) if creates[round_]]
        assert len(winners) == 1, f"create round {round_}: winners {winners}"
        found = store.read(f"race/create-{round_}")
        assert found is not None
        assert found.data == str(winners[0]).encode()

    expected_seen = first
    for round_ in range(ROUNDS):
        seen = {swaps[round_][0] for _, swaps in reports}
        assert seen == {expected_seen}, f"swap round {round_}: workers read {seen}"
        winners = [i for i, (_, swaps) in enumerate(reports) if swaps[round_][1] is not None]
        assert len(winners) == 1, f"swap round {round_}: winners {winners}"
        new_version = reports[winners[0]][1][round_][1]
        assert new_version is not None
        expected_seen = new_version
    final = store.read("race/cas")
    assert final is not None
    assert final.version == expected_seen
    assert final.data.startswith(f"{ROUNDS - 1}:".encode())


@pytest.mark.timeout(120)
def test_writer_killed_at_random_moments_never_leaves_a_torn_document(
    mp_context: multiprocessing.context.ForkServerContext,
    spawn: Callable[..., multiprocessing.context.ForkServerProcess],
    store: LocalStore,
    directory: Path,
) -> None:
    rng = random.Random(20240607)
    killed_mid_write = 0
    iteration = 0
    # At least KILLS kills, and more (bounded) until one has landed inside a write.
    while iteration < KILLS or (killed_mid_write == 0 and iteration < 10 * KILLS):
        iteration += 1
        reader, writer = mp_context.Pipe(duplex=False)
        child = spawn(_crash_writer, str(directory), iteration * 1_000_000, writer)
        writer.close()
        for _ in range(rng.randint(1, 4)):
            assert reader.poll(CHILD_SECONDS), f"writer {iteration} stopped writing"
            reader.recv_bytes()
        # Not synchronisation: a random pause picks where in its next write the child dies.
        time.sleep(rng.uniform(0, 0.006))
        child.kill()
        child.join(CHILD_SECONDS)
        reader.close()
        assert child.exitcode == -9, f"writer {iteration} ended on its own: {child.exitcode}"

        killed_mid_write += any(path.suffix == ".tmp" for path in directory.rglob("*"))
        assert set(store.list("")) <= set(CRASH_KEYS), store.list("")
        for key in CRASH_KEYS:
            _check_payload(key, store.read(key))

    for key in CRASH_KEYS:  # the next write reuses (and so removes) any temp file left
        found = store.read(key)
        if found is None:
            store.create(key, b"after")
        else:
            store.replace(key, b"after", found.version)
        after = store.read(key)
        assert after is not None
        assert after.data == b"after"
    assert not list(directory.rglob("*.tmp")), "temp files survived a later write"
    assert killed_mid_write > 0, "no kill landed inside a write; the test proved nothing"


@pytest.mark.timeout(60)
def test_killed_lock_holder_does_not_block_later_writes(
    mp_context: multiprocessing.context.ForkServerContext,
    spawn: Callable[..., multiprocessing.context.ForkServerProcess],
    store: LocalStore,
    directory: Path,
) -> None:
    ours, theirs = mp_context.Pipe()
    holder = spawn(_hold_lock, str(directory), "held/key", theirs)
    theirs.close()
    assert ours.poll(CHILD_SECONDS), "the lock holder never took the lock"
    assert ours.recv_bytes() == b"locked"

    impatient = LocalStore(directory, lock_timeout=0.05)
    with pytest.raises(StoreUnavailable, match="lock") as caught:
        impatient.create("held/key", b"blocked")
    assert not caught.value.outcome_unknown
    assert store.read("held/key") is None

    holder.kill()
    holder.join(CHILD_SECONDS)
    assert holder.exitcode == -9
    ours.close()
    assert impatient.create("held/key", b"free") != ""  # the lock file stays; the lock doesn't
    assert len(list((directory / ".locks").iterdir())) == 1


def test_leftover_temp_files_are_ignored_and_cleaned_by_the_next_write(
    store: LocalStore, directory: Path
) -> None:
    version = store.create("a/b", b"real")
    torn = directory / "a.d" / "b.obj.tmp"
    torn.write_bytes(b"0123456789abcdef0123456789abcdef\nhalf of a docu")
    orphan = directory / "new.obj.tmp"  # a create killed before its rename
    orphan.write_bytes(b"junk")

    assert store.list("") == ["a/b"]
    assert store.read("a/b") == Versioned(b"real", version)
    assert store.read("new") is None

    newer = store.replace("a/b", b"newer", version)
    assert not torn.exists()
    assert store.read("a/b") == Versioned(b"newer", newer)
    store.create("new", b"made")
    assert not orphan.exists()

    torn.write_bytes(b"junk")
    store.delete("a/b", newer)
    assert not torn.exists(), "delete leaves no temp file behind"


@pytest.mark.timeout(60)
def test_reads_see_whole_snapshots_while_another_thread_writes(store: LocalStore) -> None:
    written: dict[str, bytes] = {store.create("snap", b"v0"): b"v0"}
    seen: list[Versioned] = []
    done = threading.Event()

    def write() -> None:
        try:
            version = next(iter(written))
            for serial in range(1, 200):
                data = f"v{serial}".encode() * (serial % 17)
                version = store.replace("snap", data, version)
                written[version] = data
        finally:
            done.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    while not done.is_set():
        found = store.read("snap")
        assert found is not None
        seen.append(found)
    writer.join(30)
    assert len(written) == 200
    for found in seen:
        assert written.get(found.version) == found.data, f"read mixed two writes: {found!r}"


# -- layout -----------------------------------------------------------------------------------


def test_layout_keeps_look_alike_keys_apart(store: LocalStore, directory: Path) -> None:
    keys = sorted(
        [
            "x",
            "x.obj",
            "x.d",
            "x.d/y",
            "x/y",
            "x/y.obj",
            "x.obj/y",
            ".locks",
            ".locks/x",
            "..x",
            "x..",
            "x.tmp",
            "x.obj.tmp",
        ]
    )
    for key in keys:
        store.create(key, key.encode())
    assert store.list("") == keys
    for key in keys:
        found = store.read(key)
        assert found is not None
        assert found.data == key.encode()
    root = directory.resolve()
    for path in directory.rglob("*"):
        assert path.resolve().is_relative_to(root)
    assert (directory / ".locks").is_dir()
    assert (directory / "x.d" / "y.obj").is_file()


def test_files_not_written_by_the_store_are_skipped_or_refused(
    store: LocalStore, directory: Path
) -> None:
    (directory / "README").write_text("notes")
    (directory / ".obj").write_bytes(b"no segment")
    (directory / "plain.obj").write_bytes(b"no version header")
    assert store.list("") == ["plain"]
    with pytest.raises(StoreError, match="plain") as caught:
        store.read("plain")
    assert not isinstance(caught.value, StoreUnavailable)
    with pytest.raises(StoreError, match="plain"):
        store.replace("plain", b"x", "0" * 32)


def test_store_directory_is_created_and_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = LocalStore("deep/store")
    assert store.directory == str(tmp_path / "deep" / "store")
    assert (tmp_path / "deep" / "store" / ".locks").is_dir()
    assert str(tmp_path) in repr(store)
    caps = store.capabilities
    assert (caps.shared_across_processes, caps.shared_across_hosts, caps.conditional_delete) == (
        True,
        False,
        True,
    )


def test_overlong_key_segment_is_refused_before_any_request(store: LocalStore) -> None:
    with pytest.raises(ConfigError, match="segment"):
        store.create("a/" + "s" * 250, b"x")
    assert store.stats.total == 0
    store.create("a/" + "s" * 200, b"x")  # long keys are fine in shorter segments


# -- errors -----------------------------------------------------------------------------------


def test_directory_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        LocalStore(afile)
    with pytest.raises(ConfigError, match="not a directory"):
        LocalStore(afile / "below")
    with pytest.raises(ConfigError, match="lock_timeout"):
        LocalStore(tmp_path, lock_timeout=0)


def test_removed_store_directory_gives_access_errors(store: LocalStore, directory: Path) -> None:
    version = store.create("k", b"x")
    shutil.rmtree(directory)
    calls: dict[str, Callable[[], object]] = {
        "read": lambda: store.read("k"),
        "create": lambda: store.create("k", b"y"),
        "replace": lambda: store.replace("k", b"y", version),
        "delete": lambda: store.delete("k", version),
    }
    for name, call in calls.items():
        with pytest.raises(StoreAccessError, match=r"'k'.*missing"):
            call()
        assert not directory.exists(), f"{name} recreated the store directory"
    with pytest.raises(StoreAccessError, match="missing"):
        store.list("")
    directory.write_text("now a file")
    with pytest.raises(StoreAccessError):
        store.read("k")


def test_permission_error_is_an_access_error(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = store.create("k", b"x")
    real_open = os.open

    def refuse_temp(path: str, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if str(path).endswith(".tmp"):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(os, "open", refuse_temp)
    with pytest.raises(StoreAccessError, match="'k'") as caught:
        store.replace("k", b"y", version)
    assert isinstance(caught.value, PermissionError)
    assert isinstance(caught.value.__cause__, PermissionError)
    monkeypatch.undo()
    assert store.read("k") == Versioned(b"x", version)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_directory_is_an_access_error(store: LocalStore, directory: Path) -> None:
    directory.chmod(0o555)
    try:
        with pytest.raises(StoreAccessError, match="'k'"):
            store.create("k", b"x")
    finally:
        directory.chmod(0o755)


def test_io_error_before_the_rename_did_not_land(
    store: LocalStore, directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = store.create("k", b"x")

    def fail(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(StoreUnavailable, match="'k'") as caught:
        store.replace("k", b"y", version)
    assert not caught.value.outcome_unknown
    monkeypatch.undo()
    assert store.read("k") == Versioned(b"x", version)
    assert not list(directory.glob("*.tmp"))


def test_io_error_at_the_rename_may_have_landed(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(src: str, dst: str) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(StoreUnavailable, match="'k'") as caught:
        store.create("k", b"x")
    assert caught.value.outcome_unknown


def test_non_durable_store_keeps_the_contract_basics(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/nd?durable=false")
    assert isinstance(store, LocalStore) and "durable=False" in repr(store)
    first = store.create("k", b"one")
    second = store.replace("k", b"one", first)
    assert first != second
    with pytest.raises(ConditionFailed):
        store.replace("k", b"two", first)
    assert store.read("k") == Versioned(b"one", second)
    with pytest.raises(ConfigError, match="durable"):
        open_store(f"file://{tmp_path}/nd?durable=maybe")
