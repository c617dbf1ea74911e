"""Run the ``prioritylock`` command as a user would: ``python -m prioritylock`` subprocesses.

:class:`Cli` runs one command to its end (:meth:`Cli.run`) or starts one in the background
(:meth:`Cli.spawn`); a background command's stdout lines arrive on a queue, so a test waits for a
readiness line instead of sleeping.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from prioritylock import Lock, LockBuilder
from prioritylock.stores import LocalStore, ObjectStore

CHILD = str(Path(__file__).with_name("_child.py"))
_WAITING = re.compile(r"prioritylock: waiting for ")


@dataclass(frozen=True)
class Result:
    """How a finished command went."""

    code: int
    stdout: str
    stderr: str

    def one_error_line(self, code: int) -> str:
        """Assert the documented failure shape: ``code``, one stderr line, no traceback."""
        assert self.code == code, f"exit {self.code}, wanted {code}; stderr: {self.stderr!r}"
        assert "Traceback" not in self.stderr, self.stderr
        # A store slower than a second is first announced ("waiting for the store at ..."): a
        # note, not part of the error (a loaded machine makes even a local server that slow).
        lines = [line for line in self.stderr.splitlines() if not _WAITING.match(line)]
        assert len(lines) == 1, f"wanted one line on stderr, got {lines!r}"
        assert lines[0].startswith("prioritylock: ") or lines[0].startswith("{"), lines[0]
        return lines[0]


def _pump(stream: IO[str], sink: queue.Queue[str | None], keep: list[str]) -> None:
    try:
        for line in iter(stream.readline, ""):
            keep.append(line)
            sink.put(line.rstrip("\n"))
    finally:
        sink.put(None)


def _interruptible_children() -> None:
    """Commands we start get Ctrl-C (SIGINT) at its default, as at a terminal. A shell script's
    background job inherits SIGINT ignored, and passes that on through exec: were the suite run
    so (``scripts/test &`` in a non-interactive shell), every command would ignore the tests'
    Ctrl-C. A signal this process handles is reset to the default in a child at exec, so this
    process handles it (as Python does when started from a terminal). Main thread only."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class Background:
    """A command running in the background; its stdout lines readable as they come."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err_lines: queue.Queue[str | None] = queue.Queue()
        self._out: list[str] = []
        self._err: list[str] = []
        self._threads = [
            threading.Thread(target=_pump, args=(self.proc.stdout, self.lines, self._out)),
            threading.Thread(target=_pump, args=(self.proc.stderr, self.err_lines, self._err)),
        ]
        for thread in self._threads:
            thread.daemon = True
            thread.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect(self, prefix: str, timeout: float = 15.0, *, stderr: bool = False) -> str:
        """The next stdout (or ``stderr``) line that starts with ``prefix`` (earlier lines are
        skipped)."""
        deadline = time.monotonic() + timeout
        lines = self.err_lines if stderr else self.lines
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no line starting with {prefix!r}; stderr: {''.join(self._err)!r}"
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, (
                f"stdout closed before a line starting with {prefix!r};"
                f" stderr: {''.join(self._err)!r}"
            )
            if line.startswith(prefix):
                return line

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def finish(self, timeout: float = 20.0) -> Result:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        for thread in self._threads:
            thread.join(5)
        self._close()
        return Result(code, "".join(self._out), "".join(self._err))

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(5)
        for thread in self._threads:
            thread.join(5)
        self._close()

    def _close(self) -> None:
        # A CMD that outlived the command still holds the pipes: closing a stream that a reader
        # thread is blocked on would block too, so leave those to the (daemon) readers.
        if any(thread.is_alive() for thread in self._threads):
            return
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


class Terminal:
    """A command on a pseudo-terminal: read what it shows, type an answer, collect the rest."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self._master, slave = os.openpty()
        try:
            self.proc = subprocess.Popen(
                argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True
            )
        finally:
            os.close(slave)
        self.shown = ""

    def _read(self, timeout: float) -> bool:
        """One chunk of output into ``shown``; False once the terminal is closed."""
        ready, _, _ = select.select([self._master], [], [], timeout)
        assert ready, f"the command showed nothing new for {timeout} s: {self.shown!r}"
        try:
            chunk = os.read(self._master, 4096)
        except OSError:  # EIO: every copy of the slave side is closed
            return False
        self.shown += chunk.decode(errors="replace")
        return bool(chunk)

    def expect(self, text: str, timeout: float = 15.0) -> None:
        """Wait until the terminal has shown ``text``."""
        deadline = time.monotonic() + timeout
        while text not in self.shown:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never shown; shown: {self.shown!r}"
            assert self._read(left), f"closed before {text!r} was shown: {self.shown!r}"

    def type(self, line: str) -> None:
        os.write(self._master, line.encode() + b"\n")

    def finish(self, timeout: float = 20.0) -> tuple[int, str]:
        """The exit code and everything the terminal showed."""
        deadline = time.monotonic() + timeout
        try:
            while self._read(max(0.01, deadline - time.monotonic())):
                pass
            code = self.proc.wait(max(0.01, deadline - time.monotonic()))
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
            os.close(self._master)
        return code, self.shown


class Cli:
    """``python -m prioritylock`` with a clean environment (plus ``env``)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PRIORITYLOCK"))}
        base.update(
            AWS_CONFIG_FILE=os.devnull,
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
            AWS_EC2_METADATA_DISABLED="true",
            PYTHONUNBUFFERED="1",
        )
        base.update(env or {})
        self.env = base
        _interruptible_children()
        self._background: list[Background] = []
        self._terminals: list[Terminal] = []

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "prioritylock", *args]

    def run(self, *args: str, timeout: float = 20.0) -> Result:
        done = subprocess.run(
            self.argv(*args),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def spawn(self, *args: str) -> Background:
        background = Background(self.argv(*args), self.env)
        self._background.append(background)
        return background

    def on_terminal(self, *args: str) -> Terminal:
        """Start a command with a pseudo-terminal as its stdin, stdout and stderr."""
        terminal = Terminal(self.argv(*args), self.env)
        self._terminals.append(terminal)
        return terminal

    def close(self) -> None:
        """Kill whatever is still running (a failed test's leftovers)."""
        for background in self._background:
            if background.proc.poll() is None:
                background.kill()
        for terminal in self._terminals:
            if terminal.proc.poll() is None:
                terminal.proc.kill()
                terminal.proc.wait(5)


def child(name: str, markers: Path, mode: str, *extra: str) -> list[str]:
    """The argv of a test CMD (see ``_child.py``)."""
    return [sys.executable, CHILD, name, str(markers), mode, *extra]


def ready_fields(line: str) -> dict[str, str]:
    """``ready NAME k=v ...`` as a dict."""
    return dict(part.split("=", 1) for part in line.split()[2:])


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every object file of a local store (not its lock files): to show nothing changed."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and ".locks" not in path.parts
    }


def holder(store: ObjectStore, path: str, **options: object) -> Lock:
    """A lock in this process, built with the builder's setters named in ``options``."""
    builder = LockBuilder().store(store).path(path)
    for name, value in options.items():
        getattr(builder, name)(value)
    return builder.build()


def local(directory: Path) -> LocalStore:
    return LocalStore(directory)


def s3_url(endpoint: str, bucket: str, prefix: str = "locks", region: str = "us-east-1") -> str:
    return f"s3://{bucket}/{prefix}?endpoint={endpoint}&region={region}&addressing=path"
