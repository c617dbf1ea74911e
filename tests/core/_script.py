"""Drive a flow of ``prioritylock._flows`` by a script of the effects it must yield.

A script is a list of :class:`Step`: what the next effect must be (an effect type, the ``NOW`` or
``ARM`` singleton, or a predicate) and what the driver answers: a value to send in, an exception
to throw in at the ``yield``, or a callable given the effects so far that returns either (for a
read that must return what the flow just wrote). Running off either end of the script fails,
naming the step, so a flow that takes a different path says where it left the script.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from prioritylock._effects import NOW, Flow, Lose, Put
from prioritylock._lease import Lease, decode
from prioritylock._state import mark_lost

__all__ = ["Step", "drive", "last_put", "lose", "now", "put_lease"]

Expect = type | object | Callable[[Any], bool]


@attrs.frozen
class Step:
    expect: Expect
    reply: Any = None


def now(mono: float, wall: float | None = None) -> Step:
    """A ``NOW`` answered with ``mono`` on the monotonic clock (the wall clock 1000 s ahead)."""
    return Step(NOW, (mono, 1000.0 + mono if wall is None else wall))


def lose(reason: str, *, force: bool = False, prefix: bool = False) -> Step:
    """A ``Lose`` for ``reason`` (or a reason starting with it, when ``prefix``), answered as
    the drivers do: the holding is marked lost (once)."""

    def expect(effect: object) -> bool:
        if not isinstance(effect, Lose) or effect.force is not force:
            return False
        return effect.reason.startswith(reason) if prefix else effect.reason == reason

    def mark(effects: list[object]) -> None:
        effect = effects[-1]
        assert isinstance(effect, Lose)
        mark_lost(effect.holding, effect.reason, force=effect.force)

    return Step(expect, mark)


def _matches(expect: Expect, effect: object) -> bool:
    if isinstance(expect, type):
        return isinstance(effect, expect)
    if callable(expect):
        return bool(expect(effect))
    return effect is expect


def drive(flow: Flow[Any], script: list[Step]) -> tuple[Any, list[object]]:
    """Run ``flow`` to its end by ``script``; return its result and every effect it yielded.

    An exception the flow raises propagates (the effects so far are lost: assert on the
    raised error and on the script having been used up, which ``drive`` checks first).
    """
    effects: list[object] = []
    steps = iter(enumerate(script))
    send: Any = None
    throw: BaseException | None = None
    while True:
        try:
            effect = flow.send(send) if throw is None else flow.throw(throw)
        except StopIteration as stop:
            left = [s.expect for _, s in steps]
            assert not left, f"the flow ended with {len(left)} step(s) unused: {left}"
            return stop.value, effects
        except BaseException:
            left = [s.expect for _, s in steps]
            assert not left, f"the flow raised with {len(left)} step(s) unused: {left}"
            raise
        effects.append(effect)
        index, step = next(steps, (len(script), None))
        assert step is not None, f"step {index}: the flow yielded {effect!r} past the script"
        assert _matches(step.expect, effect), (
            f"step {index}: expected {step.expect!r}, the flow yielded {effect!r}"
        )
        reply = step.reply(effects) if callable(step.reply) else step.reply
        send, throw = (None, reply) if isinstance(reply, BaseException) else (reply, None)


def last_put(effects: list[object]) -> Put:
    puts = [e for e in effects if isinstance(e, Put)]
    assert puts, "no write yet"
    return puts[-1]


def put_lease(effect: object) -> Lease:
    """The lease a ``Put`` effect writes."""
    assert isinstance(effect, Put)
    return decode("jobs/a", effect.data, name="jobs/a")
