"""A Griffe extension for the API reference: our docstrings are written in Sphinx's style.

- Roles become links to the reference: :class:`~prioritylock.Lock` renders as a link named
  ``Lock``, :meth:`read` inside a store's docstring as a link to that class's ``read``. A role
  whose target is not on the reference page (a private helper, say) renders as code.
- ``#:`` comments above a module or class attribute become its docstring, as Sphinx's autodoc
  reads them (the signals and the priority constants are documented that way).
- Two ``:raises X:`` fields written on one line are split, so each lands in the table, and
  reST's ``::`` before a literal block is dropped (Markdown sees the indented code block).

The public modules are read (as Griffe reads them, never imported) to learn which names the
page shows: those in ``__all__`` and, for classes, the members they define (mkdocs.yml shows
members without a docstring too).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[2]
#: The modules the API page renders, in its order.
PUBLIC_MODULES = ("prioritylock", "prioritylock.stores", "prioritylock.signals", "scopes")
#: Rendered too, but only the names listed here.
PARTLY_PUBLIC = {"prioritylock.testing": ("StoreContract",)}

_ROLE = re.compile(r":(?:class|meth|func|attr|exc|data|obj|mod):`([^`]+)`")
_RAISES_ON_ONE_LINE = re.compile(r"(?<=\S)[ \t]+(?=:raises \w+:)")
#: reST's "::" that opens a literal block: Markdown takes the indented block as code by itself.
_LITERAL_BLOCK = re.compile(r"(?:(?<=\S)(:):|[ \t]*::)[ \t]*$", re.MULTILINE)


def _anchors() -> set[str]:
    """Every name the page shows, read from the source as mkdocstrings reads it (nothing is
    imported: the docs build needs neither pytest nor the stores' SDKs)."""
    found: set[str] = set()
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    for module_name in (*PUBLIC_MODULES, *PARTLY_PUBLIC):
        module = loader.load(module_name)
        assert isinstance(module, griffe.Module)
        names = PARTLY_PUBLIC.get(module_name) or [str(name) for name in module.exports or ()]
        found.add(module_name)
        for name in names:
            found.add(f"{module_name}.{name}")
            try:
                obj = module[name]
                is_class = obj.is_class
            except (griffe.AliasResolutionError, KeyError):
                continue  # another package's (blinker.ANY): no members of ours to link to
            if is_class:
                for member in obj.members:
                    if not member.startswith("_"):
                        found.add(f"{module_name}.{name}.{member}")
    return found


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles and ``#:`` comments for mkdocstrings (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._anchors = _anchors()

    def _public_class(self, obj: griffe.Object) -> str | None:
        cls = obj if obj.is_class else obj.parent if obj.parent and obj.parent.is_class else None
        if cls is None:
            return None
        for module in (*PUBLIC_MODULES, *PARTLY_PUBLIC):
            if f"{module}.{cls.name}" in self._anchors:
                return f"{module}.{cls.name}"
        return None

    def _resolve(self, target: str, obj: griffe.Object) -> str | None:
        if target in self._anchors:
            return target
        scopes = [self._public_class(obj), *PUBLIC_MODULES, *PARTLY_PUBLIC]
        for scope in scopes:
            if scope and f"{scope}.{target}" in self._anchors:
                return f"{scope}.{target}"
        return None

    def _link(self, match: re.Match[str], obj: griffe.Object) -> str:
        text = match.group(1)
        short = text.startswith("~")
        target = text.lstrip("~.")
        shown = target.rsplit(".", 1)[-1] if short else target
        where = self._resolve(target, obj)
        return f"[`{shown}`][{where}]" if where else f"`{shown}`"

    def _comment_doc(self, obj: griffe.Object) -> str | None:
        if obj.lineno is None or not isinstance(obj.filepath, Path):
            return None
        try:
            lines = obj.lines_collection[obj.filepath]
        except KeyError:
            return None
        comment: list[str] = []
        n = obj.lineno - 2  # the line above, 0-based
        if n >= len(lines):
            return None  # a line number from a stub (.pyi) merged into its module
        while n >= 0 and lines[n].lstrip().startswith("#:"):
            comment.insert(0, lines[n].lstrip()[2:].strip())
            n -= 1
        return " ".join(comment) or None

    def _rewrite(self, obj: griffe.Object) -> None:
        if obj.docstring is None and obj.is_attribute:
            text = self._comment_doc(obj)
            if text:
                obj.docstring = griffe.Docstring(text, lineno=obj.lineno, parent=obj)
        if obj.docstring is not None:
            value = _RAISES_ON_ONE_LINE.sub("\n", obj.docstring.value)
            value = _LITERAL_BLOCK.sub(lambda m: m.group(1) or "", value)
            obj.docstring.value = _ROLE.sub(lambda m: self._link(m, obj), value)

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if not obj.is_alias:
            self._rewrite(obj)

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self._rewrite(pkg)  # on_object sees the members, not the package itself
