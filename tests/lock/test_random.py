"""The library draws its random numbers (backoff jitter, the poll pause, the renewal spread) from
a generator of its own: the ``random`` module's shared state belongs to the application."""

from __future__ import annotations

import os
import random

import pytest

from prioritylock import LockTimeout
from prioritylock import _flows as flows
from prioritylock.stores import MemoryStore
from tests.lock.helpers import make

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("driver")]


def test_locking_leaves_the_applications_random_state_alone() -> None:
    store = MemoryStore()
    random.seed(20261129)
    before = random.getstate()
    holder = make(store, lease_timeout=2)
    waiter = make(store, owner="waiter", poll_interval=0.02)
    try:
        assert holder.try_lock()  # the first renewal's place is drawn
        holder.renew()  # and the next one's
        with pytest.raises(LockTimeout):
            waiter.lock(timeout=0.2)  # polls, each pause jittered
        flows.Backoff(1.0).next()
        holder.unlock()
    finally:
        waiter.close()
        holder.close()
    assert random.getstate() == before


def test_a_forked_child_draws_other_numbers_than_its_parent() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its draws must not repeat the parent's
        os.write(write, repr(flows.spread_draw()).encode())
        os._exit(0)
    os.close(write)
    _pid, status = os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        child = float(f.read())
    assert os.waitstatus_to_exitcode(status) == 0
    assert child != flows.spread_draw()
