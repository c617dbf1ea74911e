"""Draw the figures of docs/benchmarks.md from the results files (standard library only).

    python benchmarks/figures.py      # rewrites docs/figures/bench-*.svg from benchmarks/results/

``run.py`` calls :func:`write_figures` after a run that wrote ``results/latest.json``; a test keeps
the committed SVGs equal to what this draws. Every bar is one number of a results file, and each
figure names the file, date and commit it came from.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
OUT = HERE.parent / "docs" / "figures"

FONT = "Helvetica, Arial, 'DejaVu Sans', sans-serif"
INK, MUTED, GRID = "#222222", "#666666", "#dddddd"
RAW = "#b8b8b8"  # what the lock is compared with: filelock, the SDK's own calls
OURS = "#4f7fb3"  # prioritylock
OURS_LIGHT = "#9dbbdb"  # prioritylock, a second variant (fresh Lock, emulator's CPU)
FLOOR = "#d9d9d9"
TEXT, SMALL, TITLE = 12.5, 11.0, 15.0
BAR_H, GAP, GROUP_GAP = 16.0, 5.0, 14.0
MARGIN = 16.0
PLOT_W = 420.0  # the longest bar


def text_width(text: str, size: float) -> float:
    """A generous estimate of ``text``'s width (DejaVu Sans is the widest of the fonts named)."""
    return sum(0.62 if ch.isupper() or ch.isdigit() else 0.55 for ch in text) * size + 2


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    colour: str
    shown: str  # the value as printed at the bar's end
    stacked: float = 0.0  # a second segment after the first, in OURS_LIGHT (the emulator's CPU)


@dataclass(frozen=True)
class Group:
    title: str  # "" for none
    bars: Sequence[Bar]


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str  # under the axis
    groups: Sequence[Group]
    source: str  # which results file, when and at which commit
    legend: Sequence[tuple[str, str]] = ()  # (colour, label)


def _num(value: float) -> str:
    """Three significant figures, at least."""
    digits = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{value:.3g}" if value < 1 else f"{value:,.{digits}f}"


def _ticks(top: float) -> list[float]:
    """Round axis ticks from 0 to at least ``top``."""
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 25, 50, 100, 200, 500, 1000):
        if top / step <= 6:
            count = int(top / step + 0.999999)
            return [step * i for i in range(count + 1)]
    raise ValueError(f"no ticks for {top}")


def render(chart: Chart) -> str:
    """The chart as an SVG document."""
    bars = [b for g in chart.groups for b in g.bars]
    label_w = max(text_width(b.label, TEXT) for b in bars) + 10
    ticks = _ticks(max(b.value + b.stacked for b in bars))
    scale = PLOT_W / ticks[-1]
    value_w = max(text_width(b.shown, SMALL) for b in bars) + 8
    x0 = MARGIN + label_w
    width = x0 + PLOT_W + value_w + MARGIN
    parts: list[str] = []
    y = MARGIN + TITLE
    parts.append(_text(MARGIN, y, chart.title, TITLE, bold=True))
    y += 14
    if chart.legend:
        x = MARGIN
        y += 12
        for colour, label in chart.legend:
            parts.append(_rect(x, y - 9, 10, 10, colour))
            parts.append(_text(x + 14, y, label, SMALL))
            x += 14 + text_width(label, SMALL) + 16
        y += 4
    top = y + 8
    rows: list[str] = []
    y = top
    for group in chart.groups:
        if group.title:
            y += 4 + TEXT
            rows.append(_text(MARGIN, y, group.title, TEXT, bold=True))
            y += 4
        for bar in group.bars:
            y += GAP
            rows.append(_text(x0 - 8, y + BAR_H - 4, bar.label, TEXT, anchor="end"))
            rows.append(_rect(x0, y, max(bar.value * scale, 0.5), BAR_H, bar.colour))
            end = x0 + bar.value * scale
            if bar.stacked:
                rows.append(_rect(end, y, bar.stacked * scale, BAR_H, OURS_LIGHT))
                end += bar.stacked * scale
            rows.append(_text(end + 4, y + BAR_H - 4, bar.shown, SMALL, fill=MUTED))
            y += BAR_H
        y += GROUP_GAP
    bottom = y - GROUP_GAP + GAP
    for tick in ticks:  # behind the bars
        x = x0 + tick * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" stroke="{GRID}"/>'
        )
        parts.append(_text(x, bottom + 14, f"{tick:g}", SMALL, anchor="middle", fill=MUTED))
    parts += rows
    parts.append(_text(x0 + PLOT_W / 2, bottom + 30, chart.unit, SMALL, anchor="middle"))
    height = bottom + 52
    parts.append(_text(MARGIN, height - 8, chart.source, SMALL - 1, fill=MUTED))
    body = "\n".join(parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FONT}" role="img">\n'
        f"<title>{escape(chart.title)}</title>\n"
        f'<rect width="100%" height="100%" fill="#ffffff"/>\n{body}\n</svg>\n'
    )


def _rect(x: float, y: float, w: float, h: float, fill: str) -> str:
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"/>'


def _text(
    x: float,
    y: float,
    text: str,
    size: float,
    anchor: str = "start",
    fill: str = INK,
    bold: bool = False,
) -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{weight} '
        f'fill="{fill}">{escape(text)}</text>'
    )


# -- the figures -----------------------------------------------------------------------------------

Json = dict[str, Any]


def _source(name: str, machine: Json) -> str:
    date = str(machine.get("date", "?")).replace("T", " ")[:16]
    commit = machine.get("git_commit")
    at = f" @ {commit}" if commit else ""
    return (
        f"benchmarks/results/{name}: {date} UTC{at}, {machine.get('cpu', '?')}, "
        f"{machine.get('cores', '?')} cores"
    )


_CYCLE = [
    ("threading", "threading.Lock (the floor)", FLOOR),
    ("filelock", "filelock.FileLock, same disk", RAW),
    ("memory/same", "MemoryStore, same Lock", OURS),
    ("memory/fresh", "MemoryStore, new Lock each time", OURS_LIGHT),
    ("local/same", "LocalStore, same Lock", OURS),
    ("local/fresh", "LocalStore, new Lock each time", OURS_LIGHT),
    ("local-nondurable/same", "LocalStore durable=false, same Lock", OURS),
]


def _medians(rows: dict[str, Json], bars: list[tuple[str, str, str]], unit: str) -> list[Bar]:
    """A bar of each (key, label, colour) of ``bars`` found in ``rows``: its median."""
    medians = {key: rows[key]["median"] for key, _, _ in bars if key in rows}
    return [
        Bar(label, medians[k], c, f"{_num(medians[k])} {unit}")
        for k, label, c in bars
        if k in medians
    ]


def cycle_chart(latest: Json) -> Chart:
    bars = _medians({r["variant"]: r for r in latest["sections"]["overhead"]["rows"]}, _CYCLE, "µs")
    return Chart(
        title="Uncontended try_lock() + unlock(): median µs per cycle",
        unit="µs per cycle (median)",
        groups=[Group("", bars)],
        source=_source("latest.json", latest["machine"]),
        legend=[
            (RAW, "filelock"),
            (OURS, "prioritylock, Lock object kept"),
            (OURS_LIGHT, "a new Lock object each time"),
        ],
    )


_STORES = {
    "s3-moto": "S3 (moto)",
    "s3-seaweedfs": "S3 (SeaweedFS)",
    "gcs": "GCS (fake-gcs-server)",
    "azure": "Azure (Azurite)",
}
_CLOUD = [
    ("raw_get", "SDK's own GET", RAW),
    ("raw_put", "SDK's own conditional PUT", RAW),
    ("acquire", "acquire, new Lock (2 requests)", OURS_LIGHT),
    ("acquire_known", "acquire, version known (1)", OURS),
    ("renew", "renew() (1)", OURS),
    ("release", "unlock() (1)", OURS),
]


def cloud_chart(latest: Json) -> Chart:
    rows = latest["sections"]["cloud"]["rows"]
    groups = []
    for store, title in _STORES.items():
        if bars := _medians({r["operation"]: r for r in rows if r["store"] == store}, _CLOUD, "ms"):
            groups.append(Group(title, bars))
    return Chart(
        title="Cloud stores on their emulators: median ms per operation",
        unit="ms (median; the emulator runs on the same machine)",
        groups=groups,
        source=_source("latest.json", latest["machine"]),
        legend=[
            (RAW, "the SDK's own request"),
            (OURS, "prioritylock"),
            (OURS_LIGHT, "a new Lock object"),
        ],
    )


_SCALE = [
    ("scale-memory.json", "MemoryStore"),
    ("scale-s3-moto.json", "S3 (moto)"),
    ("scale-s3-seaweedfs.json", "S3 (SeaweedFS)"),
]


def scale_chart(scale: dict[str, Json]) -> Chart:
    bars = []
    machine: Json = {}
    for name, store in _SCALE:
        if name not in scale:
            continue
        machine = machine or scale[name]["machine"]
        for row in scale[name]["rows"]:
            ours = row["cpu_percent_of_one_core"]
            emulator = row.get("emulator_cpu_percent_of_one_core") or 0.0
            shown = f"{_num(ours)}%" + (f" + {_num(emulator)}% emulator" if emulator else "")
            bars.append(
                Bar(f"{store}, {row['leases']:,} leases", ours, OURS, shown, stacked=emulator)
            )
    files = ", ".join(name for name, _ in _SCALE if name in scale)
    return Chart(
        title="One process holding many leases: CPU, % of one core",
        unit="% of one core over a 30 s window (default timings: renew every 10 s)",
        groups=[Group("", bars)],
        source=_source(files, machine),
        legend=[(OURS, "the process holding the leases"), (OURS_LIGHT, "the S3 emulator")],
    )


_CLOUD_CASES = tuple(
    f"{label}," for label in ("S3 (moto)", "S3 (SeaweedFS)", "GCS (fake-gcs)", "Azure (Azurite)")
)


def push_chart(push: Json) -> Chart:
    rows = [  # one machine, a channel: the cloud rows are their emulators' round trips
        r
        for r in push["sections"]["push"]["rows"]
        if r.get("channel") in ("notice", "other")
        and not r.get("case", "").startswith(_CLOUD_CASES)
    ]
    groups = []
    for what, title in (
        ("request -> told", "Request -> holder told"),
        ("release -> next", "Release -> next holder"),
    ):
        bars = [
            Bar(
                r["case"], r["median"], OURS if r["channel"] == "notice" else RAW, _num(r["median"])
            )
            for r in rows
            if r["what"] == what
        ]
        groups.append(Group(title, bars))
    return Chart(
        title="How fast the other side hears: median ms",
        unit="ms (median; without a notice, 10 s and up to 30 s with these timings)",
        groups=groups,
        source=_source("push.json", push["machine"]),
        legend=[(OURS, "prioritylock"), (RAW, "filelock, ZooKeeper")],
    )


def draw(results: Path = RESULTS) -> dict[str, str]:
    """The figures, by file name, drawn from the results in ``results``: those whose data are
    there (a run of some sections only leaves the others' figures as they were)."""
    latest = json.loads((results / "latest.json").read_text(encoding="utf-8"))
    files = [results / name for name, _ in _SCALE if (results / name).exists()]
    scale = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in files}
    sections = latest.get("sections", {})
    charts: dict[str, Chart] = {}
    if sections.get("overhead", {}).get("rows"):
        charts["bench-cycle.svg"] = cycle_chart(latest)
    if sections.get("cloud", {}).get("rows"):
        charts["bench-cloud.svg"] = cloud_chart(latest)
    if any(s.get("rows") for s in scale.values()):
        charts["bench-scale.svg"] = scale_chart(scale)
    if (push := results / "push.json").exists():
        charts["bench-push.svg"] = push_chart(json.loads(push.read_text(encoding="utf-8")))
    return {name: render(chart) for name, chart in charts.items()}


def write_figures(results: Path = RESULTS, out: Path = OUT) -> list[Path]:
    """Redraw the figures into ``out``; returns the files written."""
    drawn = draw(results)
    for name, svg in drawn.items():
        (out / name).write_text(svg, encoding="utf-8")
    return [out / name for name in drawn]


if __name__ == "__main__":
    for path in write_figures():
        print(path.relative_to(HERE.parent))
