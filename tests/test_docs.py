"""The docs site builds, and the links a reader follows lead somewhere.

- ``mkdocs build --strict`` succeeds: every page is in the nav, and every link and anchor between
  pages resolves (mkdocs.yml turns those checks into warnings, and strict mode into errors).
- README.md (also the PyPI page) links only by absolute URL, each to a page that exists; the
  project URLs, the version and the changelog agree.
- Every Python snippet in README.md, the quickstart and the how-to guides runs as written (with
  a fresh directory for its store) on the package alone; shell examples quote their URLs; no
  page points at a file outside the repository.
- The figures in docs/figures/ are what docs/figures/make_figures.py draws, with no overlapping
  or overflowing labels: edit the script, not the SVG.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"

#: Inline links and images, ``[text](target "title")``, and reference definitions, ``[x]: target``.
_INLINE = re.compile(
    r"!?\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


#: What the docs build must not need: the docs tools alone build the site (never pytest, nor
#: an extra's SDK), so mkdocs runs here with these made unimportable.
_NOT_FOR_DOCS: tuple[str, ...] = ("pytest", "_pytest", "boto3", "botocore", "obstore", "google")
_NOT_FOR_DOCS += ("azure", "aiohttp", "grpc", "dapr")
_MKDOCS_WITHOUT = """
import sys
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in %r:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotInstalled())
from mkdocs.__main__ import cli
cli()
"""


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """Built with the docs tools alone; the API page lists no private module in its contents."""
    site = tmp_path / "site"
    build = _MKDOCS_WITHOUT % (_NOT_FOR_DOCS,)
    result = subprocess.run(
        [sys.executable, "-c", build, "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}{result.stdout}"
    assert (site / "index.html").is_file()
    assert (site / "priorities" / "index.html").is_file()
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'href="#prioritylock._errors"' not in api
    assert (site / "figures" / "preemption-timeline.svg").is_file()
    check_api_reference((site / "api" / "index.html").read_text(encoding="utf-8"))


#: The modules the API reference renders, as the page's own headings name them.
API_MODULES = ["prioritylock", "prioritylock.stores", "prioritylock.signals", "scopes"]


#: Re-exported from a dependency: the reference documents our names only.
_NOT_OURS = {"prioritylock.signals.ANY"}


def check_api_reference(page: str) -> None:
    """Every public name has its entry at its public path; no private path is shown."""
    anchors = set(re.findall(r'\bid="([^"]+)"', page))
    missing = [
        f"{module}.{name}"
        for module in API_MODULES
        for name in importlib.import_module(module).__all__
        if not name.startswith("_")
        and f"{module}.{name}" not in anchors
        and f"{module}.{name}" not in _NOT_OURS
    ]
    assert not missing, f"the API reference has no entry for {missing}"
    assert "prioritylock.testing.StoreContract" in anchors
    text = re.sub(r"<[^>]+>", " ", page)
    private = sorted(set(re.findall(r"\bprioritylock(?:\.\w+)*\._[a-z]\w*", text)))
    assert not private, f"private paths shown in the API reference: {private}"
    assert ":class:" not in text and ":meth:" not in text, "a Sphinx role was left unrendered"


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


#: Where README.md's links point: it is also the long description on PyPI, where a relative link
#: leads nowhere, so it links to the docs site and the repository, and each must name a real page.
DOCS_SITE = "https://prioritylock.github.io/prioritylock/"
REPOSITORY = "https://github.com/prioritylock/prioritylock"


def test_readme_links_are_absolute_and_lead_to_real_pages() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert relative_links(readme) == [], "README.md is shown on PyPI: use absolute links"
    text = _FENCE.sub("", readme)
    urls = [m.group(1).strip("<>") for m in _INLINE.finditer(text)]
    urls += [m.group(1).strip("<>") for m in _REFERENCE.finditer(text)]
    assert urls, "README.md has no links: is the pattern still right?"
    missing = []
    for url in urls:
        page = url.split("#", 1)[0]
        if page.startswith(DOCS_SITE):
            name = page[len(DOCS_SITE) :].strip("/") or "index"
            if not (ROOT / "docs" / f"{name}.md").is_file():
                missing.append(url)
        elif page.startswith(REPOSITORY + "/blob/main/"):
            if not (ROOT / page[len(REPOSITORY + "/blob/main/") :]).exists():
                missing.append(url)
        elif page != REPOSITORY:
            missing.append(url)  # somewhere we don't check: add it here if it is meant
    assert not missing, f"README.md links to pages that don't exist: {missing}"


def test_project_urls_are_the_ones_the_readme_uses() -> None:
    metadata = importlib.metadata.metadata("prioritylock")
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL") or [])
    assert urls["Documentation"] == DOCS_SITE
    assert urls["Source"] == REPOSITORY
    assert all(u.startswith((DOCS_SITE, REPOSITORY)) for u in urls.values()), urls
    # Exact pins of the development tools stay out of what users install.
    requirements = [r.split(";", 1)[0] for r in metadata.get_all("Requires-Dist") or []]
    assert requirements, "no Requires-Dist: is the metadata there?"
    assert not [r for r in requirements if "==" in r], requirements


def test_one_version_everywhere() -> None:
    """The package, its installed metadata, and the changelog's newest release agree."""
    import prioritylock

    assert importlib.metadata.version("prioritylock") == prioritylock.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[(\d[^\]]*)\]", changelog, re.MULTILINE)
    assert releases, "CHANGELOG.md names no release"
    assert releases[0] == prioritylock.__version__
    assert f"[{releases[0]}]: " in changelog, "the release heading has no link"


def test_no_doc_points_outside_the_repository() -> None:
    """Users read these; files of the developers' workspace mean nothing to them."""
    outside = re.compile(r"shared/|PROTOCOL\.md|STYLE\.md|EMULATORS\.md|/work/")
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}:{n}"
        for page in pages
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if outside.search(line)
    ]
    assert not found, f"lines that point outside the repository: {found}"


def test_no_docstring_points_outside_the_repository() -> None:
    """Docstrings end up in the API reference and in ``help()``."""
    outside = re.compile(r"shared/|PROTOCOL\.md|STYLE\.md|EMULATORS\.md|/work/")
    sources = sorted([*(ROOT / "prioritylock").rglob("*.py"), *(ROOT / "scopes").rglob("*.py")])
    found = [
        f"{source.relative_to(ROOT)}:{n}"
        for source in sources
        for n, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1)
        if outside.search(line)
    ]
    assert not found, f"lines that point outside the repository: {found}"


#: A URL in a shell command: quoted, it survives the shell's globbing of "?" and "&".
_UNQUOTED_URL = re.compile(r"(?<![\"'=])\b(?:s3|gs|az|file|memory)://")
_SHELL_FENCE = re.compile(r"^```(?:sh|shell|bash|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_yaml_examples_parse() -> None:
    import yaml

    blocks = [
        block
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for block in re.findall(
            r"^```yaml\n(.*?)^```", page.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL
        )
    ]
    assert blocks, "no YAML examples found: is the pattern still right?"
    for block in blocks:
        assert isinstance(yaml.safe_load(block), dict), block


def test_shell_examples_quote_their_urls() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        for block in _SHELL_FENCE.findall(page.read_text(encoding="utf-8")):
            for line in block.splitlines():
                if line.lstrip().startswith("#"):
                    continue
                command = line.split("  #", 1)[0]
                if _UNQUOTED_URL.search(command):
                    found.append(f"{page.relative_to(ROOT)}: {line.strip()}")
    assert not found, "quote the URLs in these shell lines:\n" + "\n".join(found)


# -- the snippets a reader copies ------------------------------------------------------------

#: The pages whose Python snippets are meant to be copied and run as they are.
SNIPPET_PAGES = [
    "README.md",
    "docs/quickstart.md",
    "docs/asyncio.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "howto").glob("*.md")),
]
#: The directory the snippets use (``file:///tmp/locks``); each run gives them a fresh one.
SNIPPET_DIRECTORY = "/tmp/locks"


def python_snippets(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)


def _snippet_cases() -> list[tuple[str, int]]:
    return [
        (page, n)
        for page in SNIPPET_PAGES
        for n, _ in enumerate(python_snippets((ROOT / page).read_text(encoding="utf-8")))
    ]


def test_snippet_pages_have_snippets() -> None:
    assert {page for page, _ in _snippet_cases()} >= {"README.md", "docs/quickstart.md"}


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("page", "index"), _snippet_cases())
def test_snippet_runs(page: str, index: int, tmp_path: Path) -> None:
    """Each snippet runs on what ``./scripts/demo`` installs (the package alone, no extra)."""
    code = python_snippets((ROOT / page).read_text(encoding="utf-8"))[index]
    imported = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    extra = imported - set(sys.stdlib_module_names) - {"prioritylock", "scopes"}
    assert not extra, f"{page} snippet {index} needs more than the package: {extra}"
    code = code.replace(SNIPPET_DIRECTORY, str(tmp_path / "locks"))
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert done.returncode == 0, f"{page} snippet {index}:\n{code}\n{done.stdout}{done.stderr}"
    assert done.stderr == ""


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
