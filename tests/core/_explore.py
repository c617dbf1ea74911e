"""An exhaustive, bounded check of the protocol core: the real flows, every interleaving.

The clients are the library's own flows (``prioritylock._flows``) on the library's own
``LockState`` (``prioritylock._driver.new_state``); nothing of the protocol is modelled here.
What is modelled is the world around them, as a driver would perform their effects:

- one versioned document (create / replace-if-version / read, conditional reads answered
  "not modified"), with faults as choices: a write that lands but whose answer is lost, a 412
  after a write that landed, a 5xx before anything happened, a 5xx on a read;
- one global time ``t`` that only moves when the scheduler chooses a tick; each client's
  monotonic clock runs at its own rate (``rate * t``), rates within the drift allowance;
- a scheduler that, at every state, chooses which client performs its next effect (a client
  that is not chosen is paused, however long time runs meanwhile), starts a client's next
  operation, runs its heartbeat when due, returns its cleanup callback (starting
  ``after_cleanup``), runs its background release, or advances time.

Search: depth-first over sequences of choices, up to ``depth`` choices. Generators can't be
copied, so a state is rebuilt by *replaying* its path of choices from a fresh world: the flows
are deterministic once nonces, lock ids and the backoff's jitter are (they are patched to
counters and a constant for the run). Replay costs a path's length per state but needs no model
of the flows' insides, which is the point. States are memoised on a fingerprint: the document,
time, every client's state and the whole chain of suspended generator frames (code position and
locals), with nonces, lock ids and versions renamed in order of appearance; a state already
explored with at least as many choices left is not explored again.

Checked at every state:

- mutual exclusion: no two clients believe they hold (``_flows.believes`` on each one's own
  clock) unless a break-glass event (forceful takeover, override, force unlock) was written
  with a fence in ``(lower fence, higher fence]``;
- fences: a document's fence never goes down, and every new holder's fence is above every
  earlier holder's;
- losses: a holding marked lost was told (a ``Lose`` effect whose ``mark_lost`` marked it), at
  most once; a holding whose ``unlock`` returned is never told it lost; an ``unlock`` whose
  release (or handover) landed in the document does not raise ``LockLost``;
- no flow raises anything but the library's typed errors;
- the line of waiters: ordered by priority, no waiter twice, never longer than ``MAX_LINE``,
  and never naming the holder once its own write has taken it.
"""

from __future__ import annotations

import itertools
import operator
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import attrs

from prioritylock import LockBuilder
from prioritylock import _effects as effects
from prioritylock import _flows as flows
from prioritylock import _lease as lease_module
from prioritylock import _protocol as proto
from prioritylock import _state as lockstate
from prioritylock._driver import new_state
from prioritylock._errors import ConditionFailed, LockLost, PriorityLockError, StoreUnavailable
from prioritylock._lease import Lease, decode
from prioritylock._listener import LockListener
from prioritylock.stores import MemoryStore
from prioritylock.stores._base import NOT_MODIFIED, Versioned

BREAK_GLASS = frozenset({"forceful_takeover", "override", "force_unlock"})
KEY = "explore/lock"

Choice = tuple[Any, ...]


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Client:
    """One client: its options and its program (operations run in order)."""

    name: str
    program: tuple[str, ...]  # "try_lock", "lock", "unlock", "force_unlock"
    priority: int = 0
    forceful: bool = False
    cooperates: bool = False  # has a listener: a cleanup ends in a handover
    override: bool = False
    #: Its acquisitions record a hint (``_hints``): a write that concerns it (a request, and
    #: the window rule's early hint) lets the scheduler run its heartbeat at once.
    hinted: bool = False
    #: Joins the line while a ``lock`` waits (the library's default; off here, so that the
    #: scenarios written before the line explore what they did).
    fair: bool = False


@dataclass(frozen=True)
class Bounds:
    """The protocol's settings (seconds) and the search bounds."""

    depth: int = 20
    max_faults: int = 1
    lease_timeout: float = 4.0
    drift: float = 1.0
    renew_interval: float = 1.5
    watch_interval: float = 1.0
    cleanup_timeout: float = 2.0
    waiting_timeout: float = 2.0
    store_timeout: float = 1.5
    poll_interval: float = 1.0
    lock_timeout: float = 8.0
    ticks: tuple[float, ...] = (0.5, 4.0)
    rates: tuple[float, ...] = (0.9, 1.1)


@dataclass(frozen=True)
class Scenario:
    """Clients, and choices made before the search starts (a start state; not counted)."""

    name: str
    clients: tuple[Client, ...]
    prefix: tuple[Choice, ...] = ()


class _Listener(LockListener):
    """A listener whose cleanup returns when the scheduler says so."""


def _config(spec: Client, b: Bounds) -> Any:
    builder = (
        LockBuilder()
        .store(MemoryStore())
        .path(KEY)
        .owner(spec.name)
        .lease_timeout(b.lease_timeout)
        .renew_interval(b.renew_interval)
        .watch_interval(b.watch_interval)
        .max_clock_drift(b.drift)
        .poll_interval(b.poll_interval)
        .store_timeout(b.store_timeout)
        .fair(spec.fair)
    )
    if spec.override:
        builder = builder.emergency_override("explore: override")
    else:
        builder = (
            builder.priority(spec.priority)
            .forceful(spec.forceful)
            .cleanup_timeout(b.cleanup_timeout)
            .waiting_timeout(b.waiting_timeout)
        )
    if spec.cooperates:
        builder = builder.listener(_Listener())
    return builder.config()


_STATES: dict[tuple[Client, Bounds], tuple[Any, lockstate.LockState]] = {}


def _state(spec: Client, b: Bounds) -> lockstate.LockState:
    """A fresh LockState for the client, as ``new_state`` makes it (the config is built and
    validated once per client and reused)."""
    made = _STATES.get((spec, b))
    if made is None:
        cfg = _config(spec, b)
        made = _STATES[spec, b] = (cfg, new_state(cfg))
    cfg, template = made
    return lockstate.LockState(
        cfg.key,
        cfg,
        name=None,  # separate processes: nothing is shared but the document
        conditional=True,  # our document answers conditional reads
        unsynced=False,
        cooperates=template.cooperates,
        inline=template.inline,
    )


# -- determinism: nonces, lock ids and jitter --------------------------------------------------


class _Det:
    """Counters for nonces and lock ids (reset per world), and jitter fixed at 1.0x."""

    nonces = itertools.count(1)

    @staticmethod
    def random() -> float:
        return 0.5


def _no_spread() -> float:
    return 0.0


def _nonce() -> str:
    return f"N{next(_Det.nonces)}Z"


class Patched:
    """Make the flows deterministic for the duration of a run (restored afterwards)."""

    _names = ((lease_module, "new_nonce"), (proto, "new_nonce"), (flows, "new_nonce"))

    def __enter__(self) -> None:
        self._saved = [getattr(m, n) for m, n in self._names]
        for module, name in self._names:
            setattr(module, name, _nonce)
        # Renewals at exactly the renew interval (the last moment the spread allows): the
        # scenarios' ticks are set by it.
        self._draw, flows.spread_draw = flows.spread_draw, _no_spread
        self._random = getattr(flows, "random")  # noqa: B009 (not exported: mypy)
        setattr(flows, "random", _Det)  # noqa: B010
        self._logging = flows.log.disabled
        flows.log.disabled = True  # the flows' warnings about injected faults, by the million

    def __exit__(self, *exc: object) -> None:
        for (module, name), value in zip(self._names, self._saved, strict=True):
            setattr(module, name, value)
        setattr(flows, "random", self._random)  # noqa: B010
        flows.spread_draw = self._draw
        flows.log.disabled = self._logging


# -- the world ----------------------------------------------------------------------------------


class Violation(Exception):
    pass


@dataclass
class Proc:
    """A client as the scheduler sees it."""

    spec: Client
    st: lockstate.LockState
    rate: float
    pc: int = 0  # next operation of the program
    flow: Any = None
    kind: str = ""  # what the running flow is: op name, beat, cleanup, bg
    pending: Any = None  # the effect the flow waits on
    until: float | None = None  # blocked until this local time (Sleep, Pause)
    due: float | None = None  # heartbeat due (local time)
    cleanups: list[lockstate.Holding] = field(default_factory=list)
    bg: tuple[lockstate.Holding, float] | None = None
    ids: int = 0
    released: list[lockstate.Holding] = field(default_factory=list)
    landed: bool = False  # the running unlock's release is in the document
    poked: bool = False  # hinted: its heartbeat may run now, due or not

    @property
    def hint(self) -> str | None:
        return f"host-{self.spec.name}:7700/token" if self.spec.hinted else None

    def mono(self, t: float) -> float:
        return self.rate * t

    def wall(self, t: float) -> float:
        return 1_000_000.0 + self.rate * t


class World:
    def __init__(self, scenario: Scenario, b: Bounds, rates: tuple[float, ...]) -> None:
        _Det.nonces = itertools.count(1)
        self.b = b
        self.t = 0.0
        self.doc: tuple[bytes, str] | None = None
        self.versions = itertools.count(1)
        self.faults = 0
        self.break_glass: set[int] = set()
        self.max_holder_fence = 0
        self.told: dict[int, int] = {}
        self.holdings: list[lockstate.Holding] = []
        self.tracing = False
        self.kinds: set[str] = set()  # events written (what the search reached)
        self.trace: list[str] = []
        self.lease: Lease | None = None
        self.procs: list[Proc] = []
        for spec, rate in zip(scenario.clients, rates, strict=True):
            self.procs.append(Proc(spec, _state(spec, b), rate))

    # -- choices -------------------------------------------------------------------------------

    def choices(self) -> list[Choice]:
        out: list[Choice] = []
        ticks: list[Choice] = [("tick", dt) for dt in self.b.ticks]
        for i, p in enumerate(self.procs):
            # Reading the clock commutes with every other client's step (only a tick changes
            # what it reads): when a client is about to read it, that is the only step offered
            # besides time passing, which loses no behaviour and spares the interleavings.
            awake = p.until is None or p.mono(self.t) >= p.until
            if p.flow is not None and p.pending is effects.NOW and awake:
                return [("step", i, "ok"), *ticks]
        faults_left = self.faults < self.b.max_faults
        for i, p in enumerate(self.procs):
            now = p.mono(self.t)
            if p.flow is not None:
                if p.until is not None and now < p.until:
                    continue
                eff = p.pending
                if isinstance(eff, effects.Put):
                    out.append(("step", i, "ok"))
                    if faults_left:
                        out += [("step", i, "lost"), ("step", i, "412"), ("step", i, "5xx")]
                elif isinstance(eff, effects.Read):
                    out.append(("step", i, "ok"))
                    if faults_left:
                        out.append(("step", i, "5xx"))
                else:
                    out.append(("step", i, "ok"))
                continue
            if p.pc < len(p.spec.program):
                out.append(("start", i, "op"))
            h = p.st.holding
            if p.due is not None and h is not None and h.active and (now >= p.due or p.poked):
                out.append(("start", i, "beat"))
            if p.cleanups:
                out.append(("start", i, "cleanup"))
            if p.bg is not None and now >= p.bg[1]:
                out.append(("start", i, "bg"))
        return out + ticks

    def apply(self, choice: Choice) -> None:
        if choice[0] in ("run", "run_until_blocked"):
            # A start state: run the client's next operation alone, no faults (to its end,
            # or until it pauses).
            i = choice[1]
            p = self.procs[i]
            self._start(i, "op")
            while p.flow is not None and (choice[0] == "run" or p.until is None):
                self._step(i, "ok")
        elif choice[0] == "run_beat":  # a start state: the client's heartbeat runs once
            i = choice[1]
            p = self.procs[i]
            self._start(i, "beat")
            while p.flow is not None and (choice[0] == "run" or p.until is None):
                self._step(i, "ok")
        elif choice[0] == "tick":
            self.t += choice[1]
            if self.tracing:
                self.trace.append(f"tick +{choice[1]:g} -> t={self.t:g}")
        elif choice[0] == "start":
            self._start(choice[1], choice[2])
        else:
            self._step(choice[1], choice[2])
        self.check()

    # -- running flows -----------------------------------------------------------------------

    def _say(self, p: Proc, text: str) -> None:
        if self.tracing:
            self.trace.append(f"{p.spec.name} @{p.mono(self.t):.2f}: {text}")

    def _start(self, i: int, what: str) -> None:
        p = self.procs[i]
        st = p.st
        now = p.mono(self.t)
        if what == "beat":
            h = st.holding
            assert h is not None
            p.due, p.poked = None, False
            self._run(p, "beat", flows.beat(st, h))
            return
        if what == "cleanup":
            h = p.cleanups.pop(0)
            self._run(p, "cleanup", flows.after_cleanup(st, h))
            return
        if what == "bg":
            assert p.bg is not None
            h = p.bg[0]
            p.bg = (h, float("inf"))  # running
            self._run(p, "bg", flows.background_release(st, h))
            return
        op = p.spec.program[p.pc]
        p.pc += 1
        h = st.holding
        flow: Any
        if op in ("try_lock", "lock"):
            if lockstate.believes(h, now):
                if self.tracing:
                    self._say(p, f"{op}: skipped (holds the lock)")
                return
            p.ids += 1
            lock_id = f"I{i}x{p.ids}Z"
            deadline = None if op == "try_lock" else now + self.b.lock_timeout
            blocking = op == "lock"
            flow = flows.acquire(st, lock_id, blocking=blocking, deadline=deadline, hint=p.hint)
            self._run(p, op, flow)
        elif op == "unlock":
            # Lock.unlock: _require_holding notices an expired lease first.
            if lockstate.expired(h, now):
                assert h is not None
                self._lose(p, h, "expired", False)
            try:
                held = lockstate.require_holding(st.key, h)
            except PriorityLockError as exc:
                if p.kind == "unlock" and isinstance(exc, LockLost) and p.landed:
                    raise Violation(
                        f"{p.spec.name}'s unlock raised LockLost ({exc.reason}) after its "
                        "release landed"
                    ) from exc
                if self.tracing:
                    self._say(p, f"unlock: {type(exc).__name__}")
                return
            self._run(p, op, flows.release(st, held, cleanup_done=False))
        elif op == "force_unlock":
            flow = flows.force_unlock(
                st,
                by=p.spec.name,
                message="explore",
                overwrite_corrupt=False,
                if_fence=None,
                if_owner=None,
            )
            self._run(p, op, flow)
        else:  # pragma: no cover
            raise ValueError(op)

    def _run(self, p: Proc, kind: str, flow: Any) -> None:
        if self.tracing:
            self._say(p, f"start {kind}")
        p.flow, p.kind, p.landed = flow, kind, False
        self._advance(p, None, None)

    def _advance(self, p: Proc, value: Any, error: BaseException | None) -> None:
        """Send a result into p's flow and perform local effects until the next effect that
        touches the store, the clock or time."""
        while True:
            try:
                eff = p.flow.send(value) if error is None else p.flow.throw(error)
            except StopIteration as stop:
                self._finished(p, stop.value)
                return
            except PriorityLockError as exc:
                if p.kind == "unlock" and isinstance(exc, LockLost) and p.landed:
                    raise Violation(
                        f"{p.spec.name}'s unlock raised LockLost ({exc.reason}) after its "
                        "release landed"
                    ) from exc
                if self.tracing:
                    self._say(p, f"{p.kind} raised {type(exc).__name__}: {exc}")
                self._finished(p, None, returned=False)
                return
            except Exception as exc:
                if self.tracing:
                    self._say(p, f"{p.kind} CRASHED {type(exc).__name__}: {exc}")
                raise Violation(f"{p.spec.name}'s {p.kind} raised {exc!r}") from exc
            value = error = None
            if eff is effects.NOW or isinstance(eff, effects.Read | effects.Put):
                p.pending = eff
                return
            if isinstance(eff, effects.Sleep | effects.Pause):
                if self.tracing:
                    self._say(p, f"{type(eff).__name__}({eff.seconds:.3f})")
                p.until = p.mono(self.t) + eff.seconds
                continue
            self._local(p, eff)

    def _local(self, p: Proc, eff: Any) -> None:
        if eff is effects.ARM or isinstance(eff, effects.Renewed):
            return
        if isinstance(eff, effects.Hint):
            # A hint may arrive at once, late or never: the scheduler chooses when (if ever) the
            # hinted holder's heartbeat runs (``_driver.LockBase._poke``).
            for q in self.procs:
                h = q.st.holding
                if q.hint in eff.hints and h is not None and h.active:
                    h.poked = q.poked = True
                    if self.tracing:
                        self._say(p, f"hints {q.spec.name}")
            return
        if isinstance(eff, effects.Hold):
            h = eff.holding
            self.holdings.append(h)
            self.told.setdefault(id(h), 0)
            p.due = eff.due
            if self.tracing:
                self._say(p, f"holds fence {h.fence} until {h.deadline:.2f}")
        elif isinstance(eff, effects.Lose):
            self._lose(p, eff.holding, eff.reason, eff.force)
        elif isinstance(eff, effects.End):
            if self.tracing:
                self._say(p, f"holding of fence {eff.holding.fence} ended")
            if p.st.holding is eff.holding:
                p.due = None
        elif isinstance(eff, effects.Cleanup):
            if self.tracing:
                self._say(p, f"cleanup requested by {eff.requestor.owner}")
            p.cleanups.append(eff.holding)
        elif isinstance(eff, effects.Denied):
            if self.tracing:
                self._say(p, "request denied")
        elif isinstance(eff, effects.RetryRelease):
            if self.tracing:
                self._say(p, "release retried in the background")
            p.bg = (eff.holding, p.mono(self.t) + 0.5)
        elif isinstance(eff, effects.Unsettled):
            # Settling only frees a claim sooner; the model checks safety, which holds without.
            if self.tracing:
                self._say(p, "acquire to be settled in the background")
        else:  # pragma: no cover
            raise Violation(f"unknown effect {eff!r}")

    def _lose(self, p: Proc, h: lockstate.Holding, reason: str, force: bool) -> None:
        if lockstate.mark_lost(h, reason, force=force):
            self.told[id(h)] = self.told.get(id(h), 0) + 1
            if self.tracing:
                self._say(p, f"told: lost fence {h.fence} ({reason})")
            if p.st.holding is h:
                p.due = None

    def _finished(self, p: Proc, value: Any, *, returned: bool = True) -> None:
        kind = p.kind
        p.flow, p.kind, p.pending, p.until = None, "", None, None
        if kind == "beat":
            p.due = value
        elif kind == "bg":
            assert p.bg is not None
            p.bg = None if value is None else (p.bg[0], value)
        elif kind == "unlock" and returned and p.st.holding is not None:
            p.released.append(p.st.holding)
        if self.tracing:
            self._say(p, f"{kind} returned {value!r}" if kind != "beat" else f"beat -> {value!r}")

    def _step(self, i: int, outcome: str) -> None:
        p = self.procs[i]
        eff = p.pending
        p.pending = None
        p.until = None
        if eff is effects.NOW:
            if self.tracing:
                self._say(p, "reads its clock")
            self._advance(p, (p.mono(self.t), p.wall(self.t)), None)
            return
        if outcome != "ok":
            self.faults += 1
        if isinstance(eff, effects.Read):
            if outcome == "5xx":
                if self.tracing:
                    self._say(p, "read -> 5xx")
                self._advance(p, None, StoreUnavailable("explore: 503"))
                return
            if self.doc is None:
                found: Any = None
            elif eff.known is not None and eff.known == self.doc[1]:
                found = NOT_MODIFIED
            else:
                found = Versioned(*self.doc)
            if self.tracing:
                self._say(p, f"read -> {_show(self.doc)}")
            self._advance(p, found, None)
            return
        assert isinstance(eff, effects.Put)
        if outcome == "5xx":
            if self.tracing:
                self._say(p, "write -> 5xx (not applied)")
            self._advance(p, None, StoreUnavailable("explore: 503"))
            return
        current = None if self.doc is None else self.doc[1]
        if (eff.create and current is not None) or (not eff.create and current != eff.version):
            if self.tracing:
                self._say(p, f"write {_show((eff.data, '?'))} -> 412")
            self._advance(p, None, ConditionFailed(KEY, "version moved"))
            return
        version = f"V{next(self.versions)}Z"
        if self.tracing:
            self._say(p, f"write {_show((eff.data, version))} lands")
        self._wrote(eff.data)
        self.doc = (eff.data, version)
        if p.kind == "unlock":
            held = p.st.holding
            now = self.lease
            assert held is not None and now is not None
            if now.holder is None or now.holder.lock_id != held.lock_id:
                p.landed = True  # our release (or handover) is in the document
        if outcome == "lost":
            if self.tracing:
                self._say(p, "  ... its answer is lost (timeout)")
            self._advance(p, None, StoreUnavailable("explore: timeout", outcome_unknown=True))
        elif outcome == "412":
            if self.tracing:
                self._say(p, "  ... answered 412 (a retry of it)")
            self._advance(p, None, ConditionFailed(KEY, "retried write"))
        else:
            self._advance(p, version, None)

    # -- the checks ----------------------------------------------------------------------------

    def _wrote(self, data: bytes) -> None:
        new = decode(KEY, data)
        old, self.lease = self.lease, new
        if old is not None and new.fence < old.fence:
            raise Violation(f"fence went down: {old.fence} -> {new.fence}")
        self._check_line(old, new)
        if new.event is not None:
            self.kinds.add(new.event.kind)
            if new.event.kind in BREAK_GLASS:
                self.break_glass.add(new.fence)
            if new.event.kind == "forceful_takeover" and (old is None or old.event != new.event):
                self._window_kept()
        new_holder = new.holder is not None and (
            old is None or old.holder is None or old.holder.lock_id != new.holder.lock_id
        )
        if new_holder:
            if new.fence <= self.max_holder_fence:
                raise Violation(
                    f"new holder with fence {new.fence}, not above an earlier holder's "
                    f"{self.max_holder_fence}"
                )
            self.max_holder_fence = new.fence

    def _window_kept(self) -> None:
        """A forceful requestor takes the lock when its wait runs out: no holder may have been
        promised a cleanup window (``Told.deadline``, its clock) that is still open."""
        for p in self.procs:
            h = p.st.holding
            told = None if h is None or not h.active else h.told
            if told is not None and p.mono(self.t) < told.deadline:
                raise Violation(
                    f"{p.spec.name} was promised cleanup until {told.deadline:.2f} (its "
                    f"clock), cut short at {p.mono(self.t):.2f} by a forceful takeover"
                )

    def _check_line(self, old: Lease | None, new: Lease) -> None:
        line = new.line
        ids = [e.entry_id for e in line]
        if len(set(ids)) != len(ids) or len(line) > lease_module.MAX_LINE:
            raise Violation(f"line with a waiter twice or too long: {ids}")
        if any(a.priority < b.priority for a, b in itertools.pairwise(line)):
            raise Violation(f"line out of priority order: {[e.priority for e in line]}")
        took = new.holder is not None and (old is None or old.holder != new.holder)
        if took and new.event is not None and new.event.kind != "handover":
            assert new.holder is not None
            if new.holder.lock_id in ids:
                raise Violation("the new holder is still in the line")
        before = 0 if old is None else len(old.line)
        if len(line) > before:
            self.kinds.add("line:join")
        elif len(line) < before:
            self.kinds.add("line:leave")

    def check(self) -> None:
        believers = []
        for p in self.procs:
            h = p.st.holding
            if lockstate.believes(h, p.mono(self.t)):
                assert h is not None
                believers.append((p, h))
        for (p, h), (q, g) in itertools.combinations(believers, 2):
            lo, hi = sorted((h.fence, g.fence))
            if lo == hi or not any(lo < f <= hi for f in self.break_glass):
                raise Violation(
                    f"{p.spec.name} (fence {h.fence}) and {q.spec.name} (fence {g.fence}) "
                    f"both believe they hold the lock at t={self.t:g}"
                )
        for h in self.holdings:
            told = self.told.get(id(h), 0)
            if told > 1:
                raise Violation(f"the loss of fence {h.fence} was told {told} times")
            if h.lost is not None and told != 1:
                raise Violation(f"fence {h.fence} was lost ({h.lost}) but never told")
        for p in self.procs:
            for h in p.released:
                if self.told.get(id(h), 0):
                    raise Violation(f"{p.spec.name}'s unlock returned, then it was told it lost")

    # -- memoisation ---------------------------------------------------------------------------

    def fingerprint(self) -> tuple[Any, ...]:
        """The state as plain, hashable data, nonces, lock ids and versions renamed in order of
        first appearance (:func:`_norm`)."""
        _RENAMED.clear()
        _SEEN.clear()
        parts: list[Any] = [
            self.t,
            _norm(self.doc),
            self.faults,
            tuple(sorted(self.break_glass)),
            self.max_holder_fence,
        ]
        for p in self.procs:
            h = p.st.holding
            parts.append(
                (
                    p.pc,
                    p.kind,
                    _norm(p.pending),
                    p.until,
                    p.due,
                    tuple([_norm(c) for c in p.cleanups]),
                    None if p.bg is None else (_norm(p.bg[0]), p.bg[1]),
                    _norm(p.st.seen),
                    _norm(p.st.holder_seen),
                    _norm(p.st.request_seen),
                    _norm(p.st.free_seen),
                    _norm(p.st.line_seen),
                    _norm(h),
                    None if h is None else self.told.get(id(h), 0),
                    len(p.released),
                    p.poked,
                    _frames(p.flow),
                )
            )
        return tuple(parts)


def _show(doc: tuple[bytes, str] | None) -> str:
    if doc is None:
        return "(absent)"
    lease = decode(KEY, doc[0])
    holder = "free" if lease.holder is None else f"{lease.holder.owner}#{lease.holder.beat}"
    req = "" if lease.requestor is None else f" request={lease.requestor.owner}"
    if lease.line:
        req += " line=" + ",".join(f"{e.owner}#{e.beat}" for e in lease.line)
    event = "" if lease.event is None else f" event={lease.event.kind}"
    return f"[fence {lease.fence} {holder}{req}{event} {doc[1]}]"


def _norm(v: Any) -> Any:
    """``v`` as plain data for the fingerprint, its tokens renamed (:func:`_rename`). Called
    millions of times per scenario: each type's treatment (and an attrs class's field getter) is
    worked out once, by :func:`_treatment`, and numbers and None are not passed in at all."""
    cls = type(v)
    treatment = _TREATMENTS.get(cls)
    if treatment is None:
        treatment = _TREATMENTS[cls] = _treatment(cls)
    kind, how = treatment
    if kind == "fields":
        # The same lease, holding or attempt is met several times in one state (in the lock
        # state, the holding and the flows' locals): rendered once.
        seen = _SEEN.get(id(v))
        if seen is None:
            tag, fields = how
            out = (tag, *[x if type(x) in _PLAIN else _norm(x) for x in fields(v)])
            seen = _SEEN[id(v)] = (v, out)
        return seen[1]
    if kind == "text":
        return _TOKEN.sub(_rename, v) if "Z" in v else v
    if kind == "plain":
        return v
    if kind == "sequence":
        return tuple([x if type(x) in _PLAIN else _norm(x) for x in v])
    if kind == "data":
        return _BYTES_TOKEN.sub(_rename_bytes, v) if b"Z" in v else v
    if kind == "backoff":
        return ("Backoff", v._cap, v._next)
    if kind == "mapping":
        return tuple(sorted((_norm(k), _norm(x)) for k, x in v.items()))
    if kind == "error":
        return (cls.__name__, _norm(str(v)))
    return how  # "name": a constant


#: What :func:`_norm` returns as it is (exact types: it is asked about subclasses).
_PLAIN = frozenset({type(None), bool, int, float})
_Treatment = tuple[str, Any]
_TREATMENTS: dict[type, _Treatment] = {}


def _treatment(cls: type) -> _Treatment:
    """How :func:`_norm` renders an instance of ``cls``: ("plain", None) as it is; ("text",
    None) and ("data", None) with their tokens renamed; ("fields", (tag, getter)) as the tag
    and its fields (the getter returns them, in order); ("sequence", None) item by item;
    ("mapping", None) as its sorted items; ("backoff", None), ("error", None); or ("name",
    constant)."""
    if issubclass(cls, str):
        return "text", None
    if issubclass(cls, bytes):
        return "data", None
    if cls is type(None) or issubclass(cls, bool | int | float):
        return "plain", None
    if issubclass(cls, lockstate.LockState):
        return "name", "st"
    if issubclass(cls, flows.Backoff):
        return "backoff", None
    if issubclass(cls, lockstate.Holding):
        fields = [f.name for f in attrs.fields(lockstate.Holding) if f.name != "entry"]
        return "fields", ("Holding", _getter(fields))
    if attrs.has(cls):
        return "fields", (cls.__name__, _getter([f.name for f in attrs.fields(cls)]))
    if issubclass(cls, tuple | list):
        return "sequence", None
    if issubclass(cls, dict):
        return "mapping", None
    if issubclass(cls, BaseException):
        return "error", None
    return "name", cls.__name__


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The attributes ``names`` of an object, as a tuple."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    return lambda v: tuple([getattr(v, name) for name in names])


def _frames(gen: Any) -> tuple[Any, ...]:
    out = []
    while gen is not None and gen.gi_frame is not None:
        frame = gen.gi_frame
        local = sorted(
            [(k, _norm(v)) for k, v in frame.f_locals.items() if not hasattr(v, "gi_frame")]
        )
        out.append((gen.gi_code.co_name, frame.f_lasti, tuple(local)))
        gen = gen.gi_yieldfrom
    return tuple(out)


#: Nonces (``N7Z``), lock ids (``I0x2Z``) and versions (``V3Z``): counters that differ between
#: two paths to the same state.
_TOKEN = re.compile(r"[NIV][0-9x]+Z")
_BYTES_TOKEN = re.compile(rb"[NIV][0-9x]+Z")
#: The tokens of the fingerprint being made, by their new names, and the objects it rendered
#: (kept, so that no ``id`` is reused meanwhile) by ``id``: both cleared for each one.
_RENAMED: dict[str, str] = {}
_SEEN: dict[int, tuple[Any, tuple[Any, ...]]] = {}


def _new_name(token: str) -> str:
    """A token's new name: its initial and the count of tokens seen before it."""
    name = _RENAMED.get(token)
    if name is None:
        name = _RENAMED[token] = f"{token[0]}{len(_RENAMED)}"
    return name


def _rename(m: re.Match[str]) -> str:
    return _new_name(m.group(0))


def _rename_bytes(m: re.Match[bytes]) -> bytes:
    return _new_name(m.group(0).decode()).encode()


# -- the scenarios ------------------------------------------------------------------------------

_A = Client("A", ("try_lock", "unlock"), priority=1, cooperates=True)
_HOLDS = ("run", 0)  # start state: A holds the lock (fence 1, renewed at t=0)
_ASKED = (_HOLDS, ("run_until_blocked", 1))  # ... and B has read it (and asked, if it outranks)
_LOST_RELEASE = (("start", 0, "op"), ("step", 0, "ok"), ("step", 0, "lost"))  # clock, write
_NOTIFIED = (*_ASKED, ("tick", 1.2), ("run_beat", 0))  # ... and A's watch has seen the request

SCENARIOS: tuple[Scenario, ...] = (
    # An equal-priority waiter that has seen A's heartbeat; A may stall, renew, release (with
    # faults), B may take over on expiry or after the release.
    Scenario(
        "takeover",
        (Client("A", ("try_lock", "unlock")), Client("B", ("lock", "unlock"))),
        prefix=(_HOLDS, ("run_until_blocked", 1)),
    ),
    # A's release landed but its answer was lost; B is waiting to take the free lock.
    Scenario(
        "lost_release",
        (Client("A", ("try_lock", "unlock")), Client("B", ("lock", "unlock"))),
        (_HOLDS, ("run_until_blocked", 1), *_LOST_RELEASE),
    ),
    # B's higher-priority request is recorded; A's cleanup returns when the scheduler says,
    # then A hands over.
    Scenario("handover", (_A, Client("B", ("try_lock", "unlock"), priority=5)), _NOTIFIED),
    # A forceful request: it takes the lock when its wait runs out (break-glass).
    Scenario(
        "forceful",
        (
            Client("A", ("try_lock", "unlock"), priority=1),
            Client("B", ("try_lock", "unlock"), priority=5, forceful=True),
        ),
        _NOTIFIED,
    ),
    # Three clients: a request pending, and the operators' override.
    Scenario(
        "override",
        (
            _A,
            Client("B", ("try_lock", "unlock"), priority=5),
            Client("C", ("try_lock", "unlock"), override=True),
        ),
        _ASKED,
    ),
    # Three clients: an operator's force_unlock while a waiter contends.
    Scenario(
        "force_unlock",
        (_A, Client("B", ("lock", "unlock")), Client("C", ("force_unlock",))),
        _ASKED,
    ),
)


#: Hints (issue 29), kept apart from the scenarios above. The window rule: B hints A before its
#: request (A's read then starts A's cleanup window) and again once it landed; the scheduler
#: delivers each hint at once, late or never (A's heartbeat runs when chosen). A keeps the lock
#: through cleanup (no listener); B, forceful, takes it when its wait runs out, which must never
#: cut short the window A was promised (``World._window_kept``).
_HINTED = (
    Client("A", ("try_lock", "unlock"), priority=1, hinted=True),
    Client("B", ("try_lock", "unlock"), priority=5, forceful=True, hinted=True),
)
#: B has read A's lease, hinted A early, and waits out the gap before writing its request.
_EARLY = (_HOLDS, ("tick", 0.5), ("run_until_blocked", 1))
HINT_SCENARIOS = (
    # A's early read (no request yet) starts now: it races B's request write.
    Scenario("hinted_race", _HINTED, (*_EARLY, ("start", 0, "beat"))),
    # A's early read is done; B's request is written (and hinted): A reads it when the
    # scheduler lets it, B takes the lock forcefully when its wait runs out.
    Scenario(
        "hinted_window",
        _HINTED,
        (*_EARLY, ("run_beat", 0), ("tick", 0.5), ("run_until_blocked", 1)),
    ),
)


def _to_write(i: int, steps: int) -> tuple[Choice, ...]:
    """Client ``i``'s operation, just started, runs ``steps`` steps: to its write."""
    return (("step", i, "ok"),) * steps


def _line_scenarios() -> tuple[Scenario, ...]:
    """The fair line: waiters joined behind a holder (a fair ``lock`` joins while it waits)."""
    b = Client("B", ("lock", "unlock"), fair=True)
    c = Client("C", ("lock", "unlock"), fair=True)
    joined = (_HOLDS, ("run_until_blocked", 1))
    released = ("run", 0)  # A's unlock, to its end

    def reads(i: int) -> tuple[Choice, ...]:  # waiter i wakes and reads the released lease
        return (("step", i, "ok"), ("step", i, "ok"))

    return (
        # Three clients: B and C in line, A released; the head takes it, the second waits its
        # turn; either may stop (never scheduled again, as if killed): the other passes it
        # once its entry is surely gone. Beats and takes may fail or land unseen.
        Scenario(
            "line_three",
            (_A, b, c),
            (*joined, ("run_until_blocked", 2), released, ("tick", 0.5), *reads(1)),
        ),
        # The head B stops (as if killed: it is about to read, and may never be scheduled
        # again) at the release; long enough after that its entry is surely gone to C, which
        # takes the lock; or B wakes and takes it, or finds it taken.
        Scenario(
            "line_head_dies",
            (_A, b, c),
            (
                *joined,
                ("run_until_blocked", 2),
                released,
                ("tick", 4.0),
                ("step", 1, "ok"),
                ("tick", 4.0),
            ),
        ),
        # A try_lock client against a lined waiter at a release.
        Scenario(
            "line_barging",
            (_A, b, Client("C", ("try_lock", "try_lock", "unlock"))),
            (*joined, released, ("tick", 0.5)),
        ),
        # A higher priority joined behind a lower one (the holder outranks both), A released.
        Scenario(
            "line_higher",
            (
                Client("A", ("try_lock", "unlock"), priority=9, cooperates=True),
                Client("B", ("lock", "unlock"), priority=1, fair=True),
                Client("C", ("lock", "unlock"), priority=5, fair=True),
            ),
            (*joined, ("run_until_blocked", 2), released, ("tick", 0.5), *reads(2)),
        ),
        # A release races a join: B has read the held lease, its join not yet written.
        Scenario(
            "line_release_race",
            (Client("A", ("try_lock", "unlock")), b),
            (_HOLDS, ("start", 1, "op"), ("step", 1, "ok")),
        ),
        # Two joins race each other and the holder's release, all three written on the same
        # version: a join that loses steps back; a release that loses to a join is made again
        # at once on what it reads.
        Scenario(
            "line_join_race",
            (Client("A", ("try_lock", "unlock")), b, c),
            (
                _HOLDS,
                *(("start", 1, "op"), *_to_write(1, 4)),  # B's join, on what A wrote
                *(("start", 2, "op"), *_to_write(2, 4)),  # C's join, on the same
                *(("start", 0, "op"), *_to_write(0, 2)),  # A's release, on the same
            ),
        ),
    )


SCENARIOS = SCENARIOS + _line_scenarios()


# -- the search ---------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: str
    states: int = 0  # distinct states (fingerprints) explored
    steps: int = 0  # choices applied (replays included)
    paths: int = 0  # maximal paths (depth reached or nothing left to choose)
    pruned: int = 0  # states cut because already explored with as much depth left
    seconds: float = 0.0
    violation: str | None = None
    trace: list[str] = field(default_factory=list)
    path: list[Choice] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)  # events written on some explored path


def explore(scenario: Scenario, b: Bounds) -> Result:
    """Every interleaving of the scenario's clients up to ``b.depth`` choices, for every
    assignment of clock rates from ``b.rates``; stops at the first violation."""
    result = Result(scenario.name)
    started = time.monotonic()
    n = len(scenario.clients)
    with Patched():
        for rates in itertools.product(b.rates, repeat=n):

            def fresh(rates: tuple[float, ...] = rates, tracing: bool = False) -> World:
                w = World(scenario, b, rates)
                w.tracing = tracing
                for c in scenario.prefix:
                    w.apply(c)
                return w

            path: list[Choice] = []
            if not _dfs(fresh, [], fresh(), b.depth, {}, result, path):
                # Replay the failing path with the trace on.
                w = fresh(tracing=True)
                w.trace.append("-- the search starts here")
                try:
                    for c in path:
                        w.apply(c)
                except Violation as exc:
                    w.trace.append(f"VIOLATION: {exc}")
                result.trace = [
                    f"clock rates: {dict(zip(_names(scenario), rates, strict=True))}",
                    *w.trace,
                ]
                result.path = path
                break
    result.seconds = time.monotonic() - started
    return result


def _names(s: Scenario) -> list[str]:
    return [c.name for c in s.clients]


def _replay(fresh: Callable[[], World], path: list[Choice]) -> World:
    w = fresh()
    for c in path:
        w.apply(c)
    return w


def _dfs(
    fresh: Callable[[], World],
    path: list[Choice],
    world: World,
    left: int,
    memo: dict[tuple[Any, ...], int],
    result: Result,
    failing: list[Choice],
) -> bool:
    result.kinds |= world.kinds
    fp = world.fingerprint()
    if memo.get(fp, -1) >= left:
        result.pruned += 1
        return True
    if fp not in memo:
        result.states += 1
    memo[fp] = left
    choices = world.choices() if left > 0 else []
    if not choices:
        result.paths += 1
        return True
    last = len(choices) - 1
    for k, choice in enumerate(choices):
        # The live world goes down the last branch; the others are rebuilt by replay.
        w = world if k == last else _replay(fresh, path)
        if w is not world:
            result.steps += len(path)
        try:
            w.apply(choice)
        except Violation as exc:
            result.violation = str(exc)
            failing[:] = [*path, choice]
            return False
        result.steps += 1
        if not _dfs(fresh, [*path, choice], w, left - 1, memo, result, failing):
            return False
    return True


def format_result(r: Result, b: Bounds) -> str:
    head = (
        f"{r.scenario}: depth {b.depth}, faults <= {b.max_faults}, rates {b.rates}: "
        f"{r.states} states, {r.paths} paths, {r.pruned} pruned, {r.steps} steps, "
        f"{r.seconds:.1f} s; events reached: {', '.join(sorted(r.kinds))}"
    )
    if r.violation is None:
        return head + ", no violation"
    return "\n".join([head, *("  " + line for line in r.trace)])


def walk(scenario: Scenario, b: Bounds, path: list[Choice]) -> Iterator[str]:
    """Replay one path (for debugging a trace)."""
    with Patched():
        w = World(scenario, b, b.rates[: len(scenario.clients)])
        for c in path:
            w.apply(c)
        yield from w.trace


__all__ = [
    "Bounds",
    "Client",
    "SCENARIOS",
    "Result",
    "Scenario",
    "Violation",
    "World",
    "explore",
    "format_result",
    "walk",
]
