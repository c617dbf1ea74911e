"""Operators act on what they saw: force unlock and override guarded by fence and owner."""

from __future__ import annotations

import pytest

from prioritylock import ConditionFailed, ConfigError
from prioritylock.stores import ObjectStore
from tests.conftest import StoreFactory
from tests.lock.helpers import builder, make

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("driver")]


def test_force_unlock_acts_only_while_the_lease_shows_the_fence_and_owner(
    store_factory: StoreFactory,
) -> None:
    holder = make(store_factory(), owner="worker-1")
    operator = make(store_factory(), owner="ops")
    assert holder.try_lock()
    fence = holder.fencing_token
    for guard in (
        {"if_fence": fence + 1},
        {"if_owner": "worker-2"},
        {"if_fence": fence, "if_owner": "x"},
    ):
        with pytest.raises(ConditionFailed, match=f"fence {fence}, held by 'worker-1'"):
            operator.force_unlock("stuck", **guard)
        assert holder.is_current_owner()
        info = operator.info()
        assert info is not None and info.held and info.fence == fence
    before = operator.force_unlock("stuck", if_fence=fence, if_owner="worker-1")
    assert before is not None and before.owner == "worker-1"
    info = operator.info()
    assert info is not None and not info.held and info.fence == fence + 1
    assert info.last_event == "force_unlock"


def test_a_guarded_force_unlock_of_a_free_or_missing_lock_fails(store: ObjectStore) -> None:
    operator = make(store, owner="ops")
    with pytest.raises(ConditionFailed, match="does not exist"):
        operator.force_unlock("why", if_fence=0)
    assert operator.info() is None
    holder = make(store, owner="w")
    assert holder.try_lock()
    holder.unlock()
    with pytest.raises(ConditionFailed, match="held by nobody"):
        operator.force_unlock("why", if_owner="w")
    info = operator.info()
    assert info is not None and info.fence == 1 and info.last_event == "released"


def test_guarded_override_takes_the_lock_only_while_the_lease_shows_the_guard(
    store_factory: StoreFactory,
) -> None:
    holder = make(store_factory(), owner="worker-1")
    assert holder.try_lock()
    fence = holder.fencing_token
    stale = builder(store_factory(), owner="ops").emergency_override(
        "db on fire", if_fence=fence + 5
    )
    with pytest.raises(ConditionFailed, match="nothing written"):
        stale.build().try_lock()
    assert holder.is_current_owner()
    wrong = builder(store_factory(), owner="ops").emergency_override("x", if_owner="worker-9")
    with pytest.raises(ConditionFailed):
        wrong.build().lock(timeout=1)
    good = (
        builder(store_factory(), owner="ops")
        .emergency_override("db on fire", if_fence=fence, if_owner="worker-1")
        .build()
    )
    assert good.try_lock()
    assert good.fencing_token == fence + 1
    info = good.info()
    assert info is not None and info.owner == "ops" and info.last_event == "override"
    good.unlock()


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"])
def test_guard_values_are_checked(store: ObjectStore, bad: object) -> None:
    with pytest.raises(ConfigError, match="if_fence"):
        builder(store).emergency_override("m", if_fence=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="if_fence"):
        make(store).force_unlock("m", if_fence=bad)  # type: ignore[arg-type]
