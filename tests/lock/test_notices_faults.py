"""Notices are hints: the lock suites hold with no notices at all (``PRIORITYLOCK_NOTICES=off``)
and with every notice dropped, duplicated or delayed at random (``faults:SEED``, ``_wake.Faults``).

The suites (every one of tests/lock/ but those that time notices or need a cloud emulator) run
in another pytest process with the setting, on the memory store and a local directory
(in-process and file-system notices both go through the board, and so do the hints the
local directory's locks send each other over UDP: under faults those are also forged, see
``_hints.Hints._forge``): in CI a seeded sample of their
tests, notices off and under one seed; under ``scripts/soak`` every test, off and under several
seeds. A failure names the setting: rerun it with
``PRIORITYLOCK_NOTICES=faults:SEED PRIORITYLOCK_STORES=memory,local pytest tests/lock/...``.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from prioritylock._wake import Faults, Notices, _configure
from tests._soak import SOAK, size

ROOT = Path(__file__).resolve().parents[2]
#: Not replayed: the notices' own tests (they time notices), and the cloud stores' suites.
OWN = ("test_notices", "test_cloud_", "test_proxy_", "test_sdk_")
SUITES = sorted(
    str(path.relative_to(ROOT))
    for path in (ROOT / "tests" / "lock").glob("test_*.py")
    if not path.name.startswith(OWN)
)
SETTINGS = ["off", *(f"faults:{seed}" for seed in range(21, 21 + size(1, 5)))]
SAMPLE = 40  # tests of the suites' ~530 in CI, for each setting: about 10 s


def _pytest(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", *args],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=size(240, 1800),
    )


@pytest.mark.soak
@pytest.mark.timeout(size(300, 3600))
@pytest.mark.parametrize("setting", SETTINGS)
def test_the_lock_suites_hold_without_reliable_notices(setting: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PRIORITYLOCK_"))}
    env |= {"PRIORITYLOCK_NOTICES": setting, "PRIORITYLOCK_STORES": "memory,local"}
    if not SOAK:  # a seeded sample of the tests collected (tests/conftest.py picks it)
        env["PRIORITYLOCK_SAMPLE"] = f"{SAMPLE}:{setting}"
    ran = _pytest("-q", "-x", *SUITES, env=env)
    assert ran.returncode == 0, f"{setting}\n{ran.stdout[-6000:]}\n{ran.stderr[-2000:]}"
    assert SOAK or " deselected" in ran.stdout, f"not sampled:\n{ran.stdout[-2000:]}"


class _HeldFaults(Faults):
    """Keeps the late notices for the test to send, in the order their delays would."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.held: list[tuple[float, Callable[[], None]]] = []

    def later(self, delay: float, send: Callable[[], None]) -> None:
        self.held.append((delay, send))


def _mix(seed: int) -> tuple[list[int], list[int]]:
    """What 1,000 notices became: (those sent at once, in order; then every one, in order)."""
    faults = _HeldFaults(seed)
    sent: list[int] = []
    for i in range(1000):
        faults.deliver(functools.partial(sent.append, i))
    now = list(sent)
    for _, send in sorted(faults.held, key=lambda held: held[0]):
        send()
    return now, sent


def test_faults_drop_duplicate_and_delay_notices_the_same_way_per_seed() -> None:
    now, every = _mix(7)
    assert _mix(7) == (now, every), "one seed, one mix"
    assert _mix(8) != (now, every)
    dropped = 1000 - len(set(every))
    twice = len(now) - len(set(now))
    late = len(every) - len(now)
    assert 250 < dropped < 350 and 150 < twice < 250 and 250 < late < 350, (dropped, twice, late)
    assert every[len(now) :] != sorted(every[len(now) :]), "the late ones come out of order"


def test_the_setting_turns_notices_off_or_faulty(caplog: pytest.LogCaptureFixture) -> None:
    off, faulty, odd = Notices(), Notices(), Notices()
    _configure(off, "off")
    _configure(faulty, "faults:12")
    with caplog.at_level(logging.WARNING, logger="prioritylock"):
        _configure(odd, "sometimes")
    assert (off.enabled, off.faults) == (False, None)
    assert faulty.enabled and faulty.faults is not None and faulty.faults.seed == 12
    assert (odd.enabled, odd.faults) == (True, None)
    assert "PRIORITYLOCK_NOTICES='sometimes'" in caplog.text
