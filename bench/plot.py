"""Draw pods/s against node count from the lines `bench/scale.py` ends with, so the README's plot
is redrawn from recorded runs, never drawn by hand.

    python bench/plot.py docs/scale-runs.txt -o docs/scale.svg

The input is every run's last lines, as printed (`scale:`, `scale-dra:`, `scale-dra-floor:`);
lines starting with `#` say when and how a run was made and are skipped. Each series shows,
per node count, the median of its runs (a point) and their range (a bar): plain pods (the
plain bursts of both modes' runs), DCU pods through hami-scheduler (device-plugin mode), DRA
pods (DRA mode) and the DRA floor (a trivial claim of a trivial driver, same kube-scheduler).

The SVG is written by hand, not by a plotting library: the output must be byte-for-byte the
same for the same input (tests/e2e/test_scaleplot.py redraws it and compares), which a
library's ids and metadata make awkward, and four lines of points need no more.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

LINE = re.compile(r"^(scale|scale-dra|scale-dra-floor): (.*)$")
FIELD = re.compile(r"(\w+)=([0-9.]+)")
PLAIN, DCU, DRA, FLOOR = "plain pods", "DCU pods (hami-scheduler)", "DRA pods", "DRA floor (trivial claim)"
SERIES = (PLAIN, DCU, DRA, FLOOR)
COLOURS = {PLAIN: "#555555", DCU: "#d62728", DRA: "#1f77b4", FLOOR: "#7fb3d5"}
WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 64, 190, 24, 48


class RunsError(ValueError):
    pass


@dataclass(frozen=True)
class Point:
    nodes: int
    median: float
    low: float
    high: float


def samples(text: str) -> dict[str, dict[int, list[float]]]:
    """pods/s per series and node count, from the bench's final lines."""
    found: dict[str, dict[int, list[float]]] = {series: defaultdict(list) for series in SERIES}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = LINE.match(line)
        if match is None:
            raise RunsError(f"line {number}: not a line bench/scale.py ends with: {line!r}")
        kind, rest = match.groups()
        fields = {key: float(value) for key, value in FIELD.findall(rest)}
        needed = {"scale": ("nodes", "dcu_pods_per_s", "plain_pods_per_s"),
                  "scale-dra": ("nodes", "dcu_pods_per_s", "plain_pods_per_s"),
                  "scale-dra-floor": ("nodes", "floor_pods_per_s")}[kind]
        missing = [key for key in needed if key not in fields]
        if missing:
            raise RunsError(f"line {number}: {kind} without {', '.join(missing)}: {line!r}")
        nodes = int(fields["nodes"])
        if kind == "scale-dra-floor":
            found[FLOOR][nodes].append(fields["floor_pods_per_s"])
            continue
        found[DCU if kind == "scale" else DRA][nodes].append(fields["dcu_pods_per_s"])
        found[PLAIN][nodes].append(fields["plain_pods_per_s"])
    return {series: dict(by_nodes) for series, by_nodes in found.items()}


def points(text: str) -> dict[str, list[Point]]:
    return {series: [Point(nodes, statistics.median(rates), min(rates), max(rates))
                     for nodes, rates in sorted(by_nodes.items())]
            for series, by_nodes in samples(text).items() if by_nodes}


def _ticks(top: float) -> list[float]:
    step = 10 ** math.floor(math.log10(top / 4)) if top > 0 else 1
    for factor in (1, 2, 5, 10):
        if top / (step * factor) <= 6:
            step *= factor
            break
    return [step * i for i in range(int(top // step) + 1)]


def svg(series: dict[str, list[Point]]) -> str:
    if not series:
        raise RunsError("no runs to plot")
    nodes = sorted({p.nodes for pts in series.values() for p in pts})
    top = max(p.high for pts in series.values() for p in pts) * 1.1
    low_x, high_x = math.log10(nodes[0]), math.log10(nodes[-1])
    span = high_x - low_x or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(n: int) -> float:
        return LEFT + (math.log10(n) - low_x) / span * plot_w if len(nodes) > 1 else LEFT + plot_w / 2

    def y(rate: float) -> float:
        return TOP + plot_h - rate / top * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>']
    for tick in _ticks(top):
        out.append(f'<line x1="{LEFT}" y1="{y(tick):.1f}" x2="{LEFT + plot_w}" y2="{y(tick):.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    for n in nodes:
        out.append(f'<text x="{x(n):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{n:,}</text>')
    out.append(f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="black"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="black"/>')
    out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 10}" text-anchor="middle">nodes (log scale)</text>')
    out.append(f'<text x="16" y="{TOP + plot_h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 16 {TOP + plot_h / 2:.1f})">pods bound per second</text>')
    for index, name in enumerate(s for s in SERIES if s in series):
        colour, pts = COLOURS[name], series[name]
        path = " ".join(f"{x(p.nodes):.1f},{y(p.median):.1f}" for p in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in pts:
            out.append(f'<line x1="{x(p.nodes):.1f}" y1="{y(p.low):.1f}" x2="{x(p.nodes):.1f}" y2="{y(p.high):.1f}" '
                       f'stroke="{colour}"/>')
            out.append(f'<circle cx="{x(p.nodes):.1f}" cy="{y(p.median):.1f}" r="3.5" fill="{colour}"/>')
        legend_y = TOP + 12 + index * 20
        out.append(f'<line x1="{WIDTH - RIGHT + 16}" y1="{legend_y - 4}" x2="{WIDTH - RIGHT + 36}" '
                   f'y2="{legend_y - 4}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{WIDTH - RIGHT + 42}" y="{legend_y}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="the bench's final lines, one run after another")
    parser.add_argument("-o", "--output", type=Path, help="the SVG to write (default: standard output)")
    args = parser.parse_args(argv)
    try:
        drawn = svg(points(args.runs.read_text()))
    except (OSError, RunsError) as exc:
        print(f"plot: {args.runs}: {exc}", file=sys.stderr)
        return 2
    if args.output:
        args.output.write_text(drawn)
    else:
        sys.stdout.write(drawn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
