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
# RAW: what the lock is compared with (filelock, the SDK's own calls); OURS: prioritylock;
# OURS_LIGHT: prioritylock, a second variant (fresh Lock, emulator's CPU).
RAW, OURS, OURS_LIGHT, FLOOR = "#b8b8b8", "#4f7fb3", "#9dbbdb", "#d9d9d9"
TEXT, SMALL, TITLE = 12.5, 11.0, 15.0
BAR_H, GAP, GROUP_GAP, MARGIN = 16.0, 5.0, 14.0, 16.0
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
    steps = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 25, 50, 100, 200, 500, 1000)
    step = next((x for x in steps if top / x <= 6), None)
    if step is None:
        raise ValueError(f"no ticks for {top}")
    return [step * i for i in range(int(top / step + 0.999999) + 1)]


def render(chart: Chart) -> str:
    """The chart as an SVG document."""
    bars = [b for g in chart.groups for b in g.bars]
    label_w = max(text_width(b.label, TEXT) for b in bars) + 10
    ticks = _ticks(max(b.value + b.stacked for b in bars))
    scale, x0 = PLOT_W / ticks[-1], MARGIN + label_w
    width = x0 + PLOT_W + max(text_width(b.shown, SMALL) for b in bars) + 8 + MARGIN
    parts, y = [_text(MARGIN, MARGIN + TITLE, chart.title, TITLE, bold="")], MARGIN + TITLE + 14
    if chart.legend:
        x, y = MARGIN, y + 12
        for colour, label in chart.legend:
            parts.append(_rect(x, y - 9, 10, 10, colour))
            parts.append(_text(x + 14, y, label, SMALL))
            x += 14 + text_width(label, SMALL) + 16
        y += 4
    top = y = y + 8
    rows: list[str] = []
    for group in chart.groups:
        if group.title:
            y += 4 + TEXT
            rows.append(_text(MARGIN, y, group.title, TEXT, bold=""))
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
        parts += [
            f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" stroke="{GRID}"/>',
            _text(x, bottom + 14, f"{tick:g}", SMALL, anchor="middle", fill=MUTED),
        ]
    height = bottom + 52
    parts += [*rows, _text(x0 + PLOT_W / 2, bottom + 30, chart.unit, SMALL, anchor="middle")]
    body = "\n".join([*parts, _text(MARGIN, height - 8, chart.source, SMALL - 1, fill=MUTED)])
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FONT}" role="img">\n'
        f"<title>{escape(chart.title)}</title>\n"
        f'<rect width="100%" height="100%" fill="#ffffff"/>\n{body}\n</svg>\n'
    )


def _rect(x: float, y: float, w: float, h: float, fill: str) -> str:
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"/>'


def _text(x: float, y: float, text: str, size: float, anchor: str = "start", **style: str) -> str:
    """A text element; ``style``: ``fill`` (default INK) and ``bold`` (any value: bold)."""
    weight = ' font-weight="bold"' if "bold" in style else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{weight} '
        f'fill="{style.get("fill", INK)}">{escape(text)}</text>'
    )


# -- the figures -----------------------------------------------------------------------------------

Json = dict[str, Any]


def _source(name: str, machine: Json) -> str:
    date, commit = str(machine.get("date", "?")).replace("T", " ")[:16], machine.get("git_commit")
    at, cpu = f" @ {commit}" if commit else "", f"{machine.get('cpu', '?')}"
    return f"benchmarks/results/{name}: {date} UTC{at}, {cpu}, {machine.get('cores', '?')} cores"


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
    found = [(rows[k]["median"], label, c) for k, label, c in bars if k in rows]
    return [Bar(label, median, c, f"{_num(median)} {unit}") for median, label, c in found]


def cycle_chart(latest: Json) -> Chart:
    bars = _medians({r["variant"]: r for r in latest["sections"]["overhead"]["rows"]}, _CYCLE, "µs")
    legend = [(RAW, "filelock"), (OURS, "prioritylock, Lock object kept")]
    legend.append((OURS_LIGHT, "a new Lock object each time"))
    title = "Uncontended try_lock() + unlock(): median µs per cycle"
    source = _source("latest.json", latest["machine"])
    return Chart(title, "µs per cycle (median)", [Group("", bars)], source, legend)


_STORES = {"s3-moto": "S3 (moto)", "s3-seaweedfs": "S3 (SeaweedFS)"}
_STORES |= {"gcs": "GCS (fake-gcs-server)", "azure": "Azure (Azurite)"}
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
    by_store = {s: {r["operation"]: r for r in rows if r["store"] == s} for s in _STORES}
    groups = [
        Group(t, bars) for s, t in _STORES.items() if (bars := _medians(by_store[s], _CLOUD, "ms"))
    ]
    legend = [(RAW, "the SDK's own request"), (OURS, "prioritylock")]
    legend.append((OURS_LIGHT, "a new Lock object"))
    title = "Cloud stores on their emulators: median ms per operation"
    unit, source = "ms (median; the emulator runs on the same machine)", latest["machine"]
    return Chart(title, unit, groups, _source("latest.json", source), legend)


_SCALE = [("scale-memory.json", "MemoryStore"), ("scale-s3-moto.json", "S3 (moto)")]
_SCALE.append(("scale-s3-seaweedfs.json", "S3 (SeaweedFS)"))


def scale_chart(scale: dict[str, Json]) -> Chart:
    bars: list[Bar] = []
    machine: Json = next((scale[n]["machine"] for n, _ in _SCALE if n in scale), {})
    for name, store in ((n, s) for n, s in _SCALE if n in scale):
        for row in scale[name]["rows"]:
            ours = row["cpu_percent_of_one_core"]
            emulator = row.get("emulator_cpu_percent_of_one_core") or 0.0
            shown = f"{_num(ours)}%" + (f" + {_num(emulator)}% emulator" if emulator else "")
            label = f"{store}, {row['leases']:,} leases"
            bars.append(Bar(label, ours, OURS, shown, stacked=emulator))
    files = ", ".join(name for name, _ in _SCALE if name in scale)
    title, source = "One process holding many leases: CPU, % of one core", _source(files, machine)
    unit = "% of one core over a 30 s window (default timings: renew every 10 s)"
    legend = [(OURS, "the process holding the leases"), (OURS_LIGHT, "the S3 emulator")]
    return Chart(title, unit, [Group("", bars)], source, legend)


_CLOUD_CASES = ("S3 (moto),", "S3 (SeaweedFS),", "GCS (fake-gcs),", "Azure (Azurite),")


def push_chart(push: Json) -> Chart:
    bars: dict[str, list[Bar]] = {what: [] for what in ("request -> told", "release -> next")}
    # One machine, a channel: the cloud rows are their emulators' round trips.
    for r in push["sections"]["push"]["rows"]:
        case, channel = r.get("case", ""), r.get("channel")
        keep = channel in ("notice", "other") and not case.startswith(_CLOUD_CASES)
        if r.get("what") in bars and keep:
            colour = OURS if channel == "notice" else RAW
            bars[r["what"]].append(Bar(case, r["median"], colour, _num(r["median"])))
    titles = ("Request -> holder told", "Release -> next holder")
    groups = [Group(t, b) for t, b in zip(titles, bars.values(), strict=True)]
    title = "How fast the other side hears: median ms"
    unit = "ms (median; without a notice, 10 s and up to 30 s with these timings)"
    legend = [(OURS, "prioritylock"), (RAW, "filelock, ZooKeeper")]
    return Chart(title, unit, groups, _source("push.json", push["machine"]), legend)


def draw(results: Path = RESULTS) -> dict[str, str]:
    """The figures, by file name, drawn from the results in ``results``: those whose data are
    there (a run of some sections only leaves the others' figures as they were)."""
    latest = json.loads((results / "latest.json").read_text(encoding="utf-8"))
    scale = {
        n: json.loads((results / n).read_text("utf-8")) for n, _ in _SCALE if (results / n).exists()
    }
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
    drawn = {out / name: svg for name, svg in draw(results).items()}
    for path, svg in drawn.items():
        path.write_text(svg, encoding="utf-8")
    return list(drawn)


if __name__ == "__main__":
    for path in write_figures():
        print(path.relative_to(HERE.parent))
