"""Every script in scripts/ works from a fresh clone, as README's commands do: one that runs the
project's Python tools (python, pytest, mkdocs, ruff, mypy) makes and uses .venv first, through
scripts/_venv.sh, instead of whatever ``python`` the caller's PATH holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(10)

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
_TOOL = re.compile(r"(?:^|[\s;&|(])(python|pytest|mkdocs|ruff|mypy)\b(?![-./\w])")
_VENV = re.compile(r"^\s*(?:if .*then\s*)?\.\s+scripts/_venv\.sh\b", re.MULTILINE)


def _code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


@pytest.mark.parametrize(
    "script",
    sorted(p.name for p in SCRIPTS.iterdir() if not p.name.startswith(("_", ".")) and p.is_file()),
)
def test_a_script_that_runs_python_tools_makes_the_venv_first(script: str) -> None:
    lines = _code_lines((SCRIPTS / script).read_text(encoding="utf-8"))
    uses = [n for n, line in enumerate(lines) if _TOOL.search(line.split("#", 1)[0])]
    if not uses:
        return
    sourced = [n for n, line in enumerate(lines) if _VENV.match(line)]
    assert sourced, f"scripts/{script} runs {lines[uses[0]].strip()!r} without scripts/_venv.sh"
    assert sourced[0] < uses[0], f"scripts/{script}: scripts/_venv.sh comes after its first use"
