"""The installed package holds only what an installed user can run.

The wheel ships the packages pyproject.toml names (``prioritylock``, ``scopes``). Code that needs a
source checkout (the emulator launcher, which finds Azurite in the checkout's ``node_modules``)
lives in ``tools/``, outside them; nothing shipped may import it, or the tests, or look for the
checkout's files.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Top-level modules of the checkout that the wheel does not ship.
CHECKOUT_ONLY = ("tools", "tests", "benchmarks", "examples")


def shipped_packages() -> list[Path]:
    """The wheel's packages, from pyproject.toml (read as text: tomllib needs Python 3.11)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(
        r"^\[tool\.hatch\.build\.targets\.wheel\]\npackages = \[(.*?)\]", text, re.M
    )
    assert section is not None, "pyproject.toml no longer names the wheel's packages this way"
    return [ROOT / name for name in re.findall(r'"([^"]+)"', section.group(1))]


def checkout_imports(source: str) -> list[str]:
    """The modules ``source`` imports from the checkout-only trees."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [n for n in names if n.split(".")[0] in CHECKOUT_ONLY]
    return found


def test_checkout_imports_are_found() -> None:
    source = "import os\nfrom tools import emulators\nimport tests._servers\nfrom . import x\n"
    assert checkout_imports(source) == ["tools", "tests._servers"]


def test_shipped_code_needs_no_source_checkout() -> None:
    packages = shipped_packages()
    assert [p.name for p in packages] == ["prioritylock", "scopes"]
    problems = []
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            where = path.relative_to(ROOT)
            if "node_modules" in source:
                problems.append(f"{where} looks for node_modules")
            problems += [f"{where} imports {m}" for m in checkout_imports(source)]
    assert not problems, problems


def test_emulator_launcher_is_in_the_checkout_tools() -> None:
    assert not (ROOT / "prioritylock" / "testing" / "_servers.py").exists()
    from tools import emulators

    kinds = {"s3-moto", "s3-seaweedfs", "gcs", "azure", "redis", "zookeeper", "etcd"}
    assert set(emulators.EMULATORS) == kinds
    assert emulators._CHECKOUT == ROOT  # where it finds node_modules
