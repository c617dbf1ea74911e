"""The record of this process's own writes (``stores._base.OwnWrites``) that the ZooKeeper and etcd
stores' change notices consult: the server tests show it at work; these are its edges."""

from __future__ import annotations

import os
import threading

import pytest

from prioritylock.stores._base import OwnWrites

pytestmark = [pytest.mark.timeout(30)]


def test_a_landed_write_is_ours_and_a_withdrawn_expectation_is_not() -> None:
    own = OwnWrites()
    own.begin("a", expected="1.1")
    assert own.made("a", "1.1")  # known before the answer: a notice may come first
    assert own.under_way("a") == (1, True)
    own.end("a", None, withdrawn="1.1")  # no answer: not ours after all
    assert not own.made("a", "1.1")
    assert own.under_way("a") == (1, False)
    own.begin("a")
    own.end("a", "7")
    assert own.made("a", "7") and not own.made("b", "7")


def test_made_waits_for_a_write_under_way() -> None:
    own = OwnWrites()
    own.begin("k")
    asked = threading.Event()
    answers: list[bool] = []

    def ask() -> None:
        asked.set()
        answers.append(own.made("k", "5", wait=10))

    thread = threading.Thread(target=ask)
    thread.start()
    asked.wait(5)
    own.end("k", "5")
    thread.join(10)
    assert answers == [True]
    assert own.made("k", "6", wait=0.01) is False  # nothing under way: no waiting


def test_a_forked_child_remembers_none_of_its_parents_writes() -> None:
    own = OwnWrites()
    own.begin("k")
    own.end("k", "3")
    pid = os.fork()
    if pid == 0:  # the child: the parent's write is another process's
        os._exit(0 if not own.made("k", "3") and own.under_way("k") == (0, False) else 1)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert own.made("k", "3")
