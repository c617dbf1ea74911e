"""The benchmark figures in docs/figures/ are what benchmarks/figures.py draws from the results.

Edit the script or rerun the benchmarks, never the SVGs: the committed figures must equal the
script's output for the committed ``benchmarks/results/*.json``, and every bar must move with the
number it is drawn from.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FIGURES = ROOT / "docs" / "figures"
NAMES = ["bench-cycle.svg", "bench-cloud.svg", "bench-scale.svg", "bench-push.svg"]


@pytest.fixture(scope="module")
def figures() -> ModuleType:
    sys.dont_write_bytecode = True  # no __pycache__ in benchmarks/ from a test run
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_figures", ROOT / "benchmarks" / "figures.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = False
    return module


def test_the_script_draws_every_committed_figure(figures: ModuleType) -> None:
    assert sorted(figures.draw(RESULTS)) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_committed_figure_is_up_to_date(figures: ModuleType, name: str) -> None:
    drawn = figures.draw(RESULTS)[name]
    on_disk = (FIGURES / name).read_text(encoding="utf-8")
    assert drawn == on_disk, (
        f"docs/figures/{name} differs from what benchmarks/figures.py draws from "
        "benchmarks/results/: run python benchmarks/figures.py"
    )


def _edit(path: Path, change: Callable[[Any], None]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_figures_follow_the_results(figures: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    before = figures.draw(results)

    def slower_filelock(data: Any) -> None:
        rows = data["sections"]["overhead"]["rows"]
        next(r for r in rows if r["variant"] == "filelock")["median"] = 123.456

    def slower_gcs_renew(data: Any) -> None:
        rows = data["sections"]["cloud"]["rows"]
        next(r for r in rows if (r["store"], r["operation"]) == ("gcs", "renew"))["median"] = 4.321

    def busier_heartbeat(data: Any) -> None:
        data["rows"][0]["cpu_percent_of_one_core"] = 7.89

    def slower_zookeeper(data: Any) -> None:
        rows = data["sections"]["push"]["rows"]
        next(r for r in rows if r["case"].startswith("ZooKeeper"))["median"] = 6.54

    _edit(results / "latest.json", slower_filelock)
    _edit(results / "latest.json", slower_gcs_renew)
    _edit(results / "scale-memory.json", busier_heartbeat)
    _edit(results / "push.json", slower_zookeeper)
    after = figures.draw(results)
    assert "123 µs" in after["bench-cycle.svg"] and "123 µs" not in before["bench-cycle.svg"]
    assert "4.32 ms" in after["bench-cloud.svg"] and "4.32 ms" not in before["bench-cloud.svg"]
    assert "7.89%" in after["bench-scale.svg"] and "7.89%" not in before["bench-scale.svg"]
    assert "6.54" in after["bench-push.svg"] and "6.54" not in before["bench-push.svg"]


def test_each_figure_names_its_results_file(figures: ModuleType) -> None:
    drawn = figures.draw(RESULTS)
    latest = json.loads((RESULTS / "latest.json").read_text(encoding="utf-8"))["machine"]
    for name in ("bench-cycle.svg", "bench-cloud.svg"):
        assert "benchmarks/results/latest.json" in drawn[name]
        assert latest["git_commit"] in drawn[name]
    assert "scale-memory.json" in drawn["bench-scale.svg"]
    assert "benchmarks/results/push.json" in drawn["bench-push.svg"]


def test_a_partial_run_redraws_only_its_own_figures(figures: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)

    def overhead_only(data: Any) -> None:
        data["sections"] = {"overhead": data["sections"]["overhead"]}

    _edit(results / "latest.json", overhead_only)
    assert sorted(figures.draw(results)) == ["bench-cycle.svg", "bench-push.svg", "bench-scale.svg"]
