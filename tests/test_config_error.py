"""``ConfigError.option``: which option is at fault, so a front end can name it in its own words."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest

from prioritylock import ConfigError, LockBuilder
from prioritylock.stores import MemoryStore

pytestmark = pytest.mark.timeout(30)


def ready() -> LockBuilder:
    return LockBuilder().store(MemoryStore()).path("jobs/a")


CASES: list[tuple[Callable[[], object], str]] = [
    (lambda: LockBuilder().store(42), "store"),  # type: ignore[arg-type]
    (lambda: LockBuilder().path("/abs"), "path"),
    (lambda: LockBuilder().scope("x"), "scope"),  # type: ignore[arg-type]
    (lambda: LockBuilder().owner(""), "owner"),
    (lambda: LockBuilder().message("a\x00b"), "message"),
    (lambda: LockBuilder().listener(object()), "listener"),  # type: ignore[arg-type]
    (lambda: LockBuilder().priority(2147483647), "priority"),
    (lambda: LockBuilder().priority(-1), "priority"),
    (lambda: LockBuilder().forceful("yes"), "forceful"),  # type: ignore[arg-type]
    (lambda: LockBuilder().keep_waiting("no"), "keep_waiting"),  # type: ignore[arg-type]
    (lambda: LockBuilder().lease_timeout(0), "lease_timeout"),
    (lambda: LockBuilder().cleanup_timeout(float("nan")), "cleanup_timeout"),
    (lambda: LockBuilder().waiting_timeout(-1), "waiting_timeout"),
    (lambda: LockBuilder().store_timeout("1"), "store_timeout"),  # type: ignore[arg-type]
    (lambda: LockBuilder().emergency_override("m", if_fence=-1), "if_fence"),
    (lambda: LockBuilder().emergency_override("m", if_owner=""), "if_owner"),
    (lambda: LockBuilder().emergency_override(""), "message"),
    (lambda: LockBuilder().clock(object()), "clock"),  # type: ignore[arg-type]
    (lambda: LockBuilder().path("a").config(), "store"),
    (lambda: ready().lease_timeout(3).renew_interval(3).config(), "renew_interval"),
    (lambda: ready().lease_timeout(0.2).config(), "max_clock_drift"),
    (lambda: LockBuilder.from_properties({"prioritylock.bogus": 1}), "prioritylock.bogus"),
    (
        lambda: LockBuilder.from_properties({"prioritylock.priority": "high"}),
        "prioritylock.priority",
    ),
    (lambda: LockBuilder.from_properties({"prioritylock.scope": "v2/x"}), "prioritylock.scope"),
    (
        lambda: LockBuilder.from_properties({"hoodie.write.lock.conditional_write.x": 1}),
        "hoodie.base.path",
    ),
]


@pytest.mark.parametrize(("call", "option"), CASES)
def test_every_builder_error_names_its_option(call: Callable[[], object], option: str) -> None:
    with pytest.raises(ConfigError) as caught:
        call()
    error = caught.value
    assert error.option == option
    assert str(error).startswith(f"{option}: ")  # the message format is kept
    assert error.problem == str(error)[len(option) + 2 :]
    assert error.problem and not error.problem.startswith(option)


def test_an_error_about_no_one_option() -> None:
    error = ConfigError("store URL has no scheme")
    assert (error.option, error.problem, str(error)) == (None, str(error), str(error))
    other = ConfigError("a lock path: bad", option="path")  # a message not in the usual form
    assert (other.option, other.problem) == ("path", "a lock path: bad")


def test_option_survives_pickling() -> None:
    error = ConfigError("lease_timeout: must be positive", option="lease_timeout")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.option, copy.problem, str(copy)) == (
        "lease_timeout",
        "must be positive",
        "lease_timeout: must be positive",
    )
