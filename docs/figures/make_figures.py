"""Draw the docs' figures as hand-made SVG (standard library only).

    python docs/figures/make_figures.py        # rewrites the .svg files next to this script

- ``preemption-timeline.svg`` (docs/priorities.md): holder, lease document and requestor over
  time, for a cooperative handover and for a forceful takeover after a hung cleanup.
- ``lease-expiry.svg`` (docs/protocol.md): how a holder's deadline and a waiter's takeover are
  each counted on their own monotonic clock.

Both are drawn to scale from the numbers the pages give (the library's default timeouts for the
preemption). The numbered marks are explained in the pages, in text at full size. The script
fails if a label overlaps another or does not fit its bar, estimating text widths generously
(as for DejaVu Sans, the widest of the fonts named).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from xml.sax.saxutils import escape

HERE = Path(__file__).resolve().parent
FONT = "Helvetica, Arial, 'DejaVu Sans', sans-serif"
MINUS = "\N{MINUS SIGN}"
WIDTH = 1000

# Colours: one per state, used alike in both figures and in the legend.
HOLDS = ("#d3ecd3", "#4f8f4f")
CLEANS = ("#fde0b3", "#c98a2c")
WAITS = ("#d7e5f6", "#5a80b3")
LOST = ("#eeeeee", "#9a9a9a")
DOC_H = ("#f3f3f3", "#777777")
DOC_REQ = ("#fff4c2", "#b99b2a")
DOC_R = ("#dcefe9", "#4c8c7a")
DANGER = "#d9412f"
SAFE = "#3f8f48"
INK = "#222222"
MUTED = "#555555"

# Type sizes, in the picture's own units (it is 1000 wide and is usually shown about 800 wide).
TITLE, NAME, TEXT, SMALL = 16.0, 14.0, 12.5, 11.5

# Geometry of a panel of three lanes, relative to its top.
LEFT, RIGHT = 170.0, 985.0  # the time axis; lane names sit left of it
MARKS = 46.0  # the numbered marks
LANE_H, DOC_H_ = 30.0, 42.0
TOP_Y, DOC_Y, BOTTOM_Y = 88.0, 150.0, 212.0
AXIS_Y = 244.0
BRACKETS = (280.0, 311.0, 342.0)
PANEL_H = 370.0


class Svg:
    """Collects SVG elements, and checks that labels neither overlap nor overflow their bars."""

    def __init__(self, height: float) -> None:
        self.height = height
        self.back: list[str] = []  # drawn first, so the lanes' bars cover them
        self.parts: list[str] = []
        self.boxes: list[tuple[float, float, float, float, str]] = []
        self.problems: list[str] = []

    def rect(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        *,
        fill: str,
        stroke: str = "none",
        opacity: float = 1.0,
    ) -> None:
        extra = f' fill-opacity="{opacity}"' if opacity < 1 else ""
        self.parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}" '
            f'stroke="{stroke}"{extra}/>'
        )

    def line(
        self,
        x1: float,
        y1: float,
        x2: float,
        y2: float,
        *,
        stroke: str = INK,
        width: float = 1.0,
        dash: str | None = None,
        arrow: bool = False,
        behind: bool = False,
    ) -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        a = ' marker-end="url(#arrow)"' if arrow else ""
        element = (
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{stroke}" stroke-width="{width}"{d}{a}/>'
        )
        (self.back if behind else self.parts).append(element)

    def text(
        self,
        x: float,
        y: float,
        content: str,
        *,
        size: float = TEXT,
        anchor: str = "start",
        bold: bool = False,
        fill: str = INK,
    ) -> float:
        """Write a label; returns its estimated width."""
        weight = ' font-weight="bold"' if bold else ""
        self.parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"'
            f'{weight} fill="{fill}">{escape(content)}</text>'
        )
        w = text_width(content, size, bold=bold)
        left = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        self.boxes.append((left, y - size * 0.8, left + w, y + size * 0.25, content))
        return w

    def mark(self, x: float, y: float, label: str, fill: str = INK) -> None:
        self.parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="10" fill="{fill}"/>')
        self.text(x, y + 4.5, label, size=SMALL + 0.5, anchor="middle", bold=True, fill="#ffffff")

    def diamond(self, x: float, y: float, fill: str) -> None:
        r = 7.5
        self.parts.append(
            f'<path d="M{x:.1f} {y - r:.1f} L{x + r:.1f} {y:.1f} L{x:.1f} {y + r:.1f} '
            f'L{x - r:.1f} {y:.1f} Z" fill="{fill}" stroke="#ffffff" stroke-width="1"/>'
        )

    def cross(self, x: float, y: float, colour: str) -> None:
        self.parts.append(
            f'<path d="M{x - 6:.1f} {y - 6:.1f} l12 12 m0 -12 l-12 12" stroke="{colour}" '
            'stroke-width="2.4"/>'
        )

    def render(self) -> str:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{self.height:.0f}" '
            f'viewBox="0 0 {WIDTH} {self.height:.0f}" font-family="{FONT}">\n'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            'markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" '
            f'fill="{INK}"/></marker></defs>\n'
            f'<rect width="{WIDTH}" height="{self.height:.0f}" fill="#ffffff"/>\n'
        )
        return head + "\n".join(self.back + self.parts) + "\n</svg>\n"

    def check(self) -> list[str]:
        found = list(self.problems)
        for i, a in enumerate(self.boxes):
            if a[0] < 0 or a[2] > WIDTH or a[1] < 0 or a[3] > self.height:
                found.append(f"outside the picture: {a[4]!r}")
            for b in self.boxes[i + 1 :]:
                if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]:
                    found.append(f"{a[4]!r} overlaps {b[4]!r}")
        return found


def text_width(content: str, size: float, *, bold: bool = False) -> float:
    """A generous estimate of a label's width (DejaVu Sans averages about 0.6 em)."""
    narrow = sum(1 for ch in content if ch in "iljtfrI.,:;'()[]| ·")
    em = (len(content) - narrow) * 0.63 + narrow * 0.36
    return em * size * (1.1 if bold else 1.0)


class Axis:
    def __init__(self, t0: float, t1: float) -> None:
        self.t0, self.t1 = t0, t1
        self.scale = (RIGHT - LEFT) / (t1 - t0)

    def __call__(self, t: float) -> float:
        return LEFT + (t - self.t0) * self.scale


def bar(
    svg: Svg, x1: float, x2: float, yc: float, *, colours: tuple[str, str], lines: Iterable[str]
) -> None:
    """A state over time: a box from x1 to x2 with up to two centred lines of text."""
    fill, stroke = colours
    h = DOC_H_ if colours in (DOC_H, DOC_REQ, DOC_R) else LANE_H
    svg.rect(x1, yc - h / 2, x2 - x1, h, fill=fill, stroke=stroke)
    rows = list(lines)
    for i, row in enumerate(rows):
        dy = (i - (len(rows) - 1) / 2) * (TEXT + 3) + TEXT * 0.36
        w = svg.text((x1 + x2) / 2, yc + dy, row, anchor="middle")
        if w > x2 - x1 - 8:
            svg.problems.append(f"{row!r} does not fit its bar ({w:.0f} > {x2 - x1 - 8:.0f})")


def lane_names(svg: Svg, y0: float, names: list[tuple[str, str]]) -> None:
    for yc, (name, detail) in zip((TOP_Y, DOC_Y, BOTTOM_Y), names, strict=True):
        svg.text(12, y0 + yc - 2, name, size=NAME, bold=True)
        svg.text(12, y0 + yc + 15, detail, size=SMALL, fill=MUTED)


def bracket(
    svg: Svg, x1: float, x2: float, y: float, label: str, *, colour: str, anchor: str = "middle"
) -> None:
    for a, b, c, d in ((x1, y - 5, x1, y + 5), (x2, y - 5, x2, y + 5), (x1, y, x2, y)):
        svg.line(a, b, c, d, stroke=colour, width=1.5)
    tx = {"middle": (x1 + x2) / 2, "start": x1, "end": x2}[anchor]
    svg.text(tx, y + 17, label, anchor=anchor, fill=colour)


def time_axis(svg: Svg, axis: Axis, y: float, ticks: Iterable[int]) -> None:
    svg.line(LEFT, y, RIGHT, y, stroke=MUTED)
    for t in ticks:
        svg.line(axis(t), y, axis(t), y + 4, stroke=MUTED)
        label = str(t).replace("-", MINUS)
        svg.text(axis(t), y + 17, label, size=SMALL, anchor="middle", fill=MUTED)
    svg.text(12, y + 17, "t, seconds", size=SMALL, fill=MUTED)


def legend(svg: Svg, y: float, items: list[tuple[str, str, str]]) -> None:
    x = 12.0
    for kind, colour, label in items:
        if kind == "box":
            fill, stroke = colour.split("/")
            svg.rect(x, y - 10, 20, 13, fill=fill, stroke=stroke)
        elif kind == "tick":
            svg.line(x + 10, y - 11, x + 10, y + 5, stroke=colour, width=2)
        elif kind == "shade":
            svg.rect(x, y - 10, 20, 13, fill=colour, opacity=0.3)
        elif kind == "diamond":
            svg.diamond(x + 10, y - 3.5, colour)
        x += 26 + svg.text(x + 26, y + 1, label, size=SMALL) + 20


class Lanes:
    """The y coordinates of one panel's lanes, and helpers to draw events across them."""

    def __init__(self, svg: Svg, axis: Axis, y0: float) -> None:
        self.svg, self.x, self.y0 = svg, axis, y0
        self.top, self.doc, self.bottom = y0 + TOP_Y, y0 + DOC_Y, y0 + BOTTOM_Y
        self.top_edge = (self.top - LANE_H / 2, self.top + LANE_H / 2)
        self.doc_edge = (self.doc - DOC_H_ / 2, self.doc + DOC_H_ / 2)
        self.bottom_edge = (self.bottom - LANE_H / 2, self.bottom + LANE_H / 2)
        # Text baselines in the gaps between the lanes.
        self.gap_top = (self.top_edge[1] + self.doc_edge[0]) / 2 + TEXT * 0.36
        self.gap_bottom = (self.doc_edge[1] + self.bottom_edge[0]) / 2 + TEXT * 0.36

    def event(self, t: float, label: str, *, fill: str = INK, down_to_bottom: bool = True) -> None:
        """A numbered mark on top and a dashed line down through the lanes (behind the bars)."""
        x = self.x(t)
        end = self.bottom_edge[1] + 6 if down_to_bottom else self.top_edge[0] - 4
        self.svg.line(x, self.y0 + MARKS + 10, x, end, stroke=MUTED, dash="3 3", behind=True)
        self.svg.mark(x, self.y0 + MARKS, label, fill)

    def write_up(self, t: float, *, dx: float = 4) -> None:
        """The bottom lane writes the document."""
        x = self.x(t) + dx
        self.svg.line(x, self.bottom_edge[0], x, self.doc_edge[1] + 1, width=1.4, arrow=True)

    def read_up(self, t: float, *, dx: float = 4) -> None:
        """The top lane reads the document."""
        x = self.x(t) + dx
        self.svg.line(x, self.doc_edge[0], x, self.top_edge[1] + 1, width=1.4, arrow=True)

    def write_down(self, t: float, *, dx: float = 4) -> None:
        """The top lane writes the document."""
        x = self.x(t) + dx
        self.svg.line(x, self.top_edge[1], x, self.doc_edge[0] - 1, width=1.4, arrow=True)

    def read_down(self, t: float, *, dx: float = 4) -> None:
        """The bottom lane reads the document."""
        x = self.x(t) + dx
        self.svg.line(x, self.doc_edge[1], x, self.bottom_edge[0] - 1, width=1.4, arrow=True)

    def shade(self, t1: float, t2: float, colour: str) -> None:
        """Mark a stretch of time on the top and bottom lanes (not the document)."""
        for yc in (self.top, self.bottom):
            self.svg.rect(
                self.x(t1),
                yc - LANE_H / 2 - 3,
                self.x(t2) - self.x(t1),
                LANE_H + 6,
                fill=colour,
                opacity=0.22,
            )


# -- the preemption timeline ---------------------------------------------------------------------

# Default timeouts: lease 30 s (renew 10 s), cleanup 10 s, so the watch interval is
# min(10, 10 / 2) = 5 s; the requestor's waiting timeout 30 s; max_clock_drift 0.5 s.
WATCH = 5.0
WINDOW = 10.0  # min(waiting_timeout 30, cleanup_timeout 10)
DRIFT = 0.5
QUIET = -2.0  # H's last watch read before the request (mark q)
SEEN = QUIET + WATCH  # its next one, which shows the request (mark 2)
DEADLINE = QUIET + WINDOW - DRIFT  # notice.deadline


def preemption_panel(svg: Svg, y0: float, *, forceful: bool) -> None:
    x = Axis(-3.0, 14.0)
    lanes = Lanes(svg, x, y0)
    if forceful:
        title = (
            "B. Forceful takeover: the cleanup hangs; R (forceful) takes over when its wait ends"
        )
        handover, r_holds, learns = WINDOW, WINDOW, SEEN + 2 * WATCH
    else:
        title = "A. Cooperative handover: H's listener rolls back in 3.5 s and returns"
        handover, r_holds, learns = 6.5, 7.2, 6.5
    svg.text(12, y0 + 20, title, size=NAME + 1, bold=True)
    lane_names(
        svg,
        y0,
        [
            ("Holder H", "priority 1"),
            ("Lease document", "in the store"),
            ("Requestor R", "priority 10"),
        ],
    )

    # The holder, with its watch reads every 5 s as ticks on the bar's edges (clear of the text).
    bar(svg, LEFT, x(SEEN), lanes.top, colours=HOLDS, lines=["holds, fence 7"])
    if forceful:
        bar(
            svg,
            x(SEEN),
            x(learns),
            lanes.top,
            colours=CLEANS,
            lines=["cleanup hangs; H still holds"],
        )
        bar(svg, x(learns), RIGHT, lanes.top, colours=LOST, lines=["lost"])
    else:
        bar(svg, x(SEEN), x(handover), lanes.top, colours=CLEANS, lines=["cleanup (listener)"])
        bar(svg, x(handover), RIGHT, lanes.top, colours=LOST, lines=["no longer holds"])
    t = QUIET
    while t <= learns + 1e-9:
        for y1, y2 in ((-7, 6), (LANE_H - 6, LANE_H + 7)):
            top = lanes.top_edge[0]
            svg.line(x(t), top + y1, x(t), top + y2, stroke=WAITS[1], width=2.2)
        t += WATCH

    # The lease document.
    event = "forceful_takeover" if forceful else "handover"
    bar(svg, LEFT, x(0), lanes.doc, colours=DOC_H, lines=["holder H · fence 7", "no request"])
    bar(
        svg,
        x(0),
        x(handover),
        lanes.doc,
        colours=DOC_REQ,
        lines=["holder H · fence 7", "requestor R"],
    )
    bar(
        svg,
        x(handover),
        RIGHT,
        lanes.doc,
        colours=DOC_R,
        lines=["holder R · fence 8", f"event: {event}"],
    )

    # The requestor.
    bar(svg, x(0), x(r_holds), lanes.bottom, colours=WAITS, lines=["waits, polling the lease"])
    bar(svg, x(r_holds), RIGHT, lanes.bottom, colours=HOLDS, lines=["holds, fence 8"])
    svg.text(x(0) - 8, lanes.bottom + 4.5, "try_lock()", size=SMALL, anchor="end", fill=MUTED)

    # Events.
    lanes.event(QUIET, "q", fill=WAITS[1], down_to_bottom=False)
    lanes.event(0, "1")
    lanes.write_up(0)
    svg.text(x(0) + 11, lanes.gap_bottom, "writes its request")
    lanes.event(SEEN, "2")
    lanes.read_up(SEEN)
    svg.text(x(SEEN) + 11, lanes.gap_top, "watch read: request")
    if forceful:
        svg.diamond(x(DEADLINE), lanes.top_edge[1], DANGER)
        svg.text(x(DEADLINE) + 11, lanes.gap_top, "notice.deadline", fill=DANGER)
        lanes.event(handover, "3")
        lanes.write_up(handover)
        svg.text(x(handover) + 11, lanes.gap_bottom, "wait over: takes it")
        lanes.event(learns, "4")
        lanes.read_up(learns)
        svg.text(x(learns) - 6, lanes.gap_top, "sees R: lock_lost", anchor="end")
        lanes.shade(handover, learns, DANGER)
    else:
        lanes.event(handover, "3")
        lanes.write_down(handover)
        svg.text(x(handover) + 11, lanes.gap_top, "writes the handover")
        lanes.event(r_holds, "4")
        lanes.read_down(r_holds, dx=-4)
        lanes.write_up(r_holds)
        svg.text(x(r_holds) + 11, lanes.gap_bottom, "reads; writes its first renewal")

    time_axis(svg, x, y0 + AXIS_Y, range(-2, 15))
    b1, b2, b3 = (y0 + b for b in BRACKETS)
    window = f"H's window: from q, min(30, 10) {MINUS} 0.5 = 9.5 s, to notice.deadline"
    bracket(svg, x(QUIET), x(DEADLINE), b1, window, colour=CLEANS[1])
    wait = "R's wait: min(waiting_timeout 30, cleanup_timeout 10) = 10 s"
    bracket(svg, x(0), x(WINDOW), b2, wait, colour=WAITS[1])
    bracket(svg, x(0), x(SEEN), b3, "≤ one watch_interval", colour=MUTED)
    if forceful:
        both = "≤ one watch_interval: two holders; fencing protects"
        bracket(svg, x(handover), x(learns), b3, both, colour=DANGER, anchor="end")


def preemption_figure() -> Svg:
    svg = Svg(110 + 2 * PANEL_H + 10)
    svg.text(
        12,
        26,
        "A preemption, as holder, lease document and requestor see it",
        size=TITLE + 1,
        bold=True,
    )
    svg.text(
        12,
        48,
        "Default timeouts: lease 30 s, cleanup_timeout 10 s (so watch_interval 5 s), "
        "R's waiting_timeout 30 s, max_clock_drift 0.5 s. Drawn to scale.",
        size=SMALL + 0.5,
        fill=MUTED,
    )
    legend(
        svg,
        76,
        [
            ("box", "/".join(HOLDS), "holds"),
            ("box", "/".join(CLEANS), "cleans up"),
            ("box", "/".join(WAITS), "waits"),
            ("box", "/".join(LOST), "no longer holds"),
            ("tick", WAITS[1], "H's watch reads"),
            ("diamond", DANGER, "notice.deadline"),
            ("shade", DANGER, "two holders"),
        ],
    )
    preemption_panel(svg, 100, forceful=False)
    preemption_panel(svg, 100 + PANEL_H + 10, forceful=True)
    return svg


# -- lease expiry --------------------------------------------------------------------------------


def expiry_figure() -> Svg:
    lease, drift = 10.0, 0.5
    start, landed, sighted = 0.0, 0.4, 1.3  # H's renewal starts (1), lands (2); W first reads (3)
    cut_off, request = 2.0, 4.0
    ends, takeover = start + lease, sighted + lease + drift

    svg = Svg(52 + PANEL_H)
    x = Axis(-1.0, 14.0)
    y0 = 40.0
    lanes = Lanes(svg, x, y0)
    svg.text(12, 26, "Expiry, judged on two monotonic clocks", size=TITLE + 1, bold=True)
    svg.text(
        12,
        48,
        f"lease_timeout {lease:g} s, max_clock_drift {drift:g} s. H renews, then is cut off from "
        "the store; W is waiting. Neither reads the other's clock.",
        size=SMALL + 0.5,
        fill=MUTED,
    )
    lane_names(
        svg,
        y0,
        [
            ("Holder H", "its own clock"),
            ("Lease document", "in the store"),
            ("Waiter W", "its own clock"),
        ],
    )

    bar(svg, LEFT, x(ends), lanes.top, colours=HOLDS, lines=["holds, fence 7; its renewals fail"])
    bar(svg, x(ends), RIGHT, lanes.top, colours=LOST, lines=["lock_lost (expired)"])
    svg.cross(x(cut_off), lanes.top, DANGER)
    svg.text(x(cut_off) + 11, lanes.gap_top, "cut off from the store", fill=DANGER)

    bar(svg, LEFT, x(landed), lanes.doc, colours=DOC_H, lines=["beat 3"])
    bar(svg, x(landed), x(request), lanes.doc, colours=DOC_H, lines=["holder H", "beat 4"])
    bar(
        svg,
        x(request),
        x(takeover),
        lanes.doc,
        colours=DOC_REQ,
        lines=["holder H · beat 4 · a request", "new version, same (lock_id, beat)"],
    )
    bar(svg, x(takeover), RIGHT, lanes.doc, colours=DOC_R, lines=["holder W", "fence 8"])

    bar(
        svg,
        x(sighted),
        x(takeover),
        lanes.bottom,
        colours=WAITS,
        lines=["waits: (lock_id, beat 4) unchanged"],
    )
    bar(svg, x(takeover), RIGHT, lanes.bottom, colours=HOLDS, lines=["holds"])
    svg.text(x(sighted) - 8, lanes.bottom + 4.5, "lock()", size=SMALL, anchor="end", fill=MUTED)

    lanes.event(start, "1")
    lanes.write_down(start)
    lanes.event(landed, "2")
    lanes.event(sighted, "3")
    lanes.read_down(sighted)
    svg.text(x(sighted) + 11, lanes.gap_bottom, "first read of beat 4")
    lanes.event(ends, "4")
    lanes.event(takeover, "5")
    lanes.write_up(takeover)
    svg.text(x(takeover) + 11, lanes.gap_bottom, "takes over")

    time_axis(svg, x, y0 + AXIS_Y, range(-1, 15))
    b1, b2, b3 = (y0 + b for b in BRACKETS)
    bracket(svg, x(start), x(ends), b1, "H: lease_timeout, from 1", colour=HOLDS[1])
    bracket(
        svg,
        x(sighted),
        x(takeover),
        b2,
        "W: lease_timeout + max_clock_drift, from 3",
        colour=WAITS[1],
    )
    bracket(svg, x(ends), x(takeover), b3, "nobody holds", colour=SAFE, anchor="start")
    return svg


FIGURES = {"preemption-timeline.svg": preemption_figure, "lease-expiry.svg": expiry_figure}


def main() -> int:
    problems = []
    for name, draw in FIGURES.items():
        figure = draw()
        problems += [f"{name}: {p}" for p in figure.check()]
        (HERE / name).write_text(figure.render(), encoding="utf-8")
        print(f"wrote {HERE / name}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
