"""README's install section tells the truth: its extras table lists every extra the package
declares, with what each brings (``all`` included), and it works before the package is on PyPI
(from a clone or a built wheel)."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(10)

README = Path(__file__).resolve().parent.parent / "README.md"
_ROW = re.compile(r"^\| (`\w+`|\(none\)) \| ([^|]+) \|", re.MULTILINE)
_REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)[^;]*(?:;\s*extra == [\"'](\w+)[\"'])?")


def _declared() -> dict[str, set[str]]:
    """Extra (``""``: none) -> the distributions it brings, from the installed package's
    metadata (where ``all`` is already flattened)."""
    found: dict[str, set[str]] = {}
    for text in importlib.metadata.requires("prioritylock") or []:
        match = _REQUIREMENT.match(text)
        assert match is not None, text
        name, extra = match.groups()
        found.setdefault(extra or "", set()).add(name.lower())
    return found


def _table() -> dict[str, set[str]]:
    """The same, from README's table: ``all``'s row names extras, which are expanded."""
    text = README.read_text(encoding="utf-8")
    table = {
        row.strip("`") if row != "(none)" else "": {
            part.strip().lower() for part in re.split(r",| and ", brings) if part.strip()
        }
        for row, brings in _ROW.findall(text)
    }
    for extra, brings in table.items():
        named = {name for name in brings if name.startswith("`")}
        table[extra] = (brings - named).union(*(table[name.strip("`")] for name in named))
    return table


def test_the_extras_table_lists_what_each_extra_brings() -> None:
    table = _table()
    assert table == _declared()
    assert {"server", "all"} <= set(table)


def test_the_install_section_works_before_publication() -> None:
    install = README.read_text(encoding="utf-8").split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip install '.[" in install  # from a clone
    assert 'pip install "$(ls dist/prioritylock-*.whl)[' in install  # from a built wheel
