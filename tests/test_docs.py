"""The docs site builds, and the links a reader follows lead somewhere.

- ``mkdocs build --strict`` succeeds: every page is in the nav, and every link and anchor between
  pages resolves (mkdocs.yml turns those checks into warnings, and strict mode into errors).
- Every relative link in README.md points to a file or directory that exists.
- The figures in docs/figures/ are what docs/figures/make_figures.py draws, with no overlapping
  or overflowing labels: edit the script, not the SVG.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"

#: Inline links and images, ``[text](target "title")``, and reference definitions, ``[x]: target``.
_INLINE = re.compile(
    r"!?\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}{result.stdout}"
    assert (site / "index.html").is_file()
    assert (site / "priorities" / "index.html").is_file()
    assert (site / "figures" / "preemption-timeline.svg").is_file()


def relative_links(markdown: str) -> list[str]:
    """The link targets in ``markdown`` that point into the repository (code blocks skipped)."""
    text = _FENCE.sub("", markdown)
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code spans
    targets = [m.group(1) for m in _INLINE.finditer(text)]
    targets += [m.group(1) for m in _REFERENCE.finditer(text)]
    found = []
    for raw in targets:
        target = raw.strip("<>")
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "//")):
            continue  # a URL (https:, mailto:, ...) or an anchor on the same page
        found.append(target)
    return found


def test_relative_links_are_found_in_a_readme_like_text() -> None:
    text = (
        "See [the docs](docs/index.md#top), ![a](docs/figures/x.svg 'no') and [b][ref].\n"
        '[c](<docs/a b.md> "title") [web](https://example.com) [here](#section)\n'
        "```sh\n[not](a-link.md)\n```\n"
        "`[code](span.md)`\n"
        "[ref]: examples/\n"
    )
    assert relative_links(text) == [
        "docs/index.md#top",
        "docs/figures/x.svg",
        "docs/a b.md",
        "examples/",
    ]


def test_readme_relative_links_exist() -> None:
    readme = ROOT / "README.md"
    links = relative_links(readme.read_text(encoding="utf-8"))
    assert links, "README.md has no relative links: is the pattern still right?"
    missing = []
    for link in links:
        path = unquote(link.split("#", 1)[0].split("?", 1)[0])
        if not path:
            continue
        if not (readme.parent / path).exists():
            missing.append(link)
    assert not missing, f"README.md links to files that don't exist: {missing}"


def _figures_script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no __pycache__ inside docs/
    spec = importlib.util.spec_from_file_location("make_figures", FIGURES / "make_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["preemption-timeline.svg", "lease-expiry.svg"])
def test_figures_are_up_to_date(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    figure = _figures_script(monkeypatch).FIGURES[name]()
    assert figure.check() == [], f"{name}: labels overlap or overflow"
    on_disk = (FIGURES / name).read_text(encoding="utf-8")
    assert figure.render() == on_disk, (
        f"docs/figures/{name} differs from what make_figures.py draws: "
        "run python docs/figures/make_figures.py"
    )
