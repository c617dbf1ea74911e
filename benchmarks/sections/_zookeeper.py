"""Placeholder until the comparator lands."""

from __future__ import annotations

from pathlib import Path


def zookeeper(rounds: int, work: Path) -> tuple[list[int], list[int]] | None:
    return None
