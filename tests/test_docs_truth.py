"""What a newcomer reads is true: install lines that work before the package is published, the
README's pointer to ``docs/`` in a clone, the bucket to create first, the flags and the stream
events docs/serve.md names (each checked against the code that has them)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from prioritylock.cli._parse import build_parser
from prioritylock.stores._registry import SCHEMES

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parent.parent
_SHELL = re.compile(r"^```(?:sh|shell|bash|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("page", ["docs/index.md", "docs/quickstart.md", "docs/serve.md"])
def test_the_first_install_line_works_before_the_package_is_published(page: str) -> None:
    lines = [
        line.strip()
        for block in _SHELL.findall(_page(page))
        for line in block.splitlines()
        if "pip install" in line
    ]
    assert lines, f"{page} has no install line: is the pattern still right?"
    assert lines[0].startswith("pip install '.["), f"{page}: {lines[0]!r} needs PyPI"


def test_the_readme_points_a_clones_reader_at_docs() -> None:
    named = re.findall(r"`(docs/[\w/.-]*)`", _page("README.md"))
    assert "docs/" in named and "docs/index.md" in named, named
    missing = [path for path in named if not (ROOT / path).exists()]
    assert not missing, f"README.md names files that don't exist: {missing}"


def test_the_stores_page_says_how_to_create_every_cloud_stores_bucket() -> None:
    text = _page("docs/stores.md")
    section = text.split("**The bucket must exist first.**", 1)[1].split("\n\n**", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)://` \| `([^`]+)`", section, re.MULTILINE))
    # The object stores (a bucket or container each); a store of another kind needs no row.
    assert {"s3", "gs", "az"} <= set(rows) <= set(SCHEMES), rows
    assert all(" create " in command or " mb " in command for command in rows.values()), rows


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of the command and its subcommands."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def test_every_flag_the_service_page_names_exists() -> None:
    # The Deploy section's flags are podman's and docker's (--name, --ulimit, ...), not ours.
    head, _, deploy = _page("docs/serve.md").partition("\n## Deploy")
    text = head + deploy.partition("\n## ")[2]
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text))
    assert {"--store", "--app-id"} <= named, "is the pattern still right?"
    assert named - _options(build_parser()) == set(), "flags the command does not have"


def test_the_service_page_describes_every_event_the_grpc_stream_sends() -> None:
    from prioritylock.server._proto import lock_pb2

    events = lock_pb2.LockServerStream.DESCRIPTOR.oneofs_by_name["lock_server_stream"].fields
    text = _page("docs/serve.md")
    grpc = text.split("## The full API over gRPC", 1)[1].split("\n## ", 1)[0]
    stream = text.split("### Hold a lock with a stream", 1)[1].split("\n### ", 1)[0]
    for field in events:
        assert f"`{field.name}`" in grpc + stream, f"{field.name} is not described"
    assert not re.search(r"reserved|not send|does not send", grpc), "every event is sent"
