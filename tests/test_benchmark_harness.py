"""The benchmarks' harness (benchmarks/_harness.py): its statistics, pacing and results file.

The benchmarks print figures rather than pass or fail, so what they compute is checked here: a
wrong median or an interleaving that runs one variant first would skew every table quietly.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from prioritylock.stores import MemoryStore

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    sys.dont_write_bytecode = True  # no __pycache__ in benchmarks/ from a test run
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_harness", ROOT / "benchmarks" / "_harness.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = False
    return module


def test_summarize_median_and_nearest_rank_p99(harness: ModuleType) -> None:
    odd = harness.summarize([5_000, 1_000, 3_000], 1e3)
    assert (odd.n, odd.median, odd.min, odd.max, odd.mean) == (3, 3.0, 1.0, 5.0, 3.0)
    even = harness.summarize([4, 1, 3, 2], 1)
    assert even.median == 2.5
    hundred = harness.summarize(list(range(1, 101)), 1)
    assert hundred.p99 == 99  # nearest rank: the 99th of 100
    assert harness.percentile([0.3, 0.1, 0.2], 0.5) == 0.2
    with pytest.raises(ValueError, match="no samples"):
        harness.summarize([], 1)


def test_ms_summary(harness: ModuleType) -> None:
    assert harness.ms_summary([0.001, 0.003, 0.002]) == {"p50": 2.0, "p99": 3.0, "max": 3.0}
    assert harness.ms_summary([]) == {"p50": None, "p99": None, "max": None}


@dataclass(frozen=True)
class Pacing:
    warmup: int = 1
    rounds: int = 3
    budget_s: float = 60.0


def test_run_interleaved_takes_turns_round_by_round(harness: ModuleType) -> None:
    order: list[str] = []

    def loop(name: str) -> object:
        def run(k: int) -> list[int]:
            order.extend([name] * k)
            return [1] * k

        return run

    a = harness.CycleVariant("a", "A", 6, loop("a"))
    b = harness.CycleVariant("b", "B", 3, loop("b"))
    harness.run_interleaved([a, b], Pacing())
    # Warm-up of each, then three rounds: each variant a third of its target per round.
    assert order == ["a", "b", *(["a", "a", "b"] * 3)]
    assert (len(a.samples), len(b.samples)) == (6, 3)


def test_run_interleaved_stops_a_variant_over_its_budget(harness: ModuleType) -> None:
    spent = harness.CycleVariant("slow", "", 30, lambda k: [1] * k)
    spent.spent_s = 100.0  # already past every round's share of the budget
    harness.run_interleaved([spent], Pacing(warmup=0, budget_s=1.0))
    assert spent.samples == []


def test_cpu_split_and_steal(harness: ModuleType) -> None:
    # user nice system idle iowait irq softirq steal
    before = [0, 0, 0, 0, 0, 0, 0, 0]
    after = [50, 0, 10, 20, 10, 0, 0, 10]
    assert harness.cpu_split(before, after) == {"busy": 60.0, "idle": 30.0, "steal": 10.0}
    assert len(harness.cpu_times()) == 8


def test_fmt_counts(harness: ModuleType) -> None:
    assert harness.fmt_counts({"reads": 1, "replaces": 1, "total": 2}) == "2 (1 read, 1 replace)"
    assert harness.fmt_counts({"reads": 2.5, "replaces": 2}) == "4.5 (2.5 read, 2 replace)"
    assert harness.fmt_counts({"reads": 0}) == "0"


def test_write_json_replaces_the_file_whole(harness: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "results" / "latest.json"
    harness.write_json(path, {"a": 1})
    harness.write_json(path, {"b": Path("/x")})  # non-JSON values are written as strings
    assert json.loads(path.read_text(encoding="utf-8")) == {"b": "/x"}
    assert [p.name for p in path.parent.iterdir()] == ["latest.json"]  # no temporary left


def test_machine_info_names_the_commit_and_scratch_filesystem(
    harness: ModuleType, tmp_path: Path
) -> None:
    facts = harness.machine_info(tmp_path)
    assert facts["cores"] and facts["python"] and facts["prioritylock"]
    assert facts["tmp_dir"] == str(tmp_path)
    assert "filesystem" in facts
    assert "tmp_dir" not in harness.machine_info()


@pytest.mark.timeout(30)
def test_the_store_timer_counts_calls_made_on_other_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lock makes a network store's calls on worker threads: the cloud section's split of an
    operation's time (the store's, the library's) must count them (it counted only the calling
    thread's, so on network stores the library's own time was never sampled)."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    bench = importlib.import_module("_bench")
    timer = bench.StoreTimer(MemoryStore())
    worker = threading.Thread(target=timer.read, args=("a/key",))
    worker.start()
    worker.join(10)
    assert timer.spent_ns() > 0
