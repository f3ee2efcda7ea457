#!/usr/bin/env python3
"""A line chart as a standalone SVG, from measured points given on the command line — for the
growth curves in BENCHMARKS.md (no plotting library needed).

Usage:
  scripts/line-chart.py --title T --x-label X --y-label Y [--log-x] [--log-y] \
      --series "name=x1:y1,x2:y2,..." [--series ...] --out chart.svg

Axes start at zero unless logarithmic; ticks are at 1-2-5 steps (linear) or powers of ten (log).
"""
import argparse
import math
import sys
from html import escape

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 72, 170, 40, 56
COLOURS = ["#1f5fa8", "#c0392b", "#2e8b57", "#8e44ad", "#d68910", "#555555"]


def parse_series(text):
    name, _, points = text.partition("=")
    if not name or not points:
        sys.exit(f"line-chart: a series is NAME=x:y,x:y,... (got {text!r})")
    out = []
    for point in points.split(","):
        try:
            x, y = point.split(":")
            out.append((float(x), float(y)))
        except ValueError:
            sys.exit(f"line-chart: series {name!r}: {point!r} is not x:y")
    return name, sorted(out)


def nice_step(span, ticks=5):
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * power:
            return m * power
    return 10 * power


def axis(values, log):
    """(to_unit, ticks): a map from a value to [0, 1] and the tick values."""
    if log:
        if min(values) <= 0:
            sys.exit("line-chart: a logarithmic axis needs positive values")
        lo, hi = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
        hi = max(hi, lo + 1)
        return (lambda v: (math.log10(v) - lo) / (hi - lo)), [10**e for e in range(lo, hi + 1)]
    hi = max(values) or 1.0
    step = nice_step(hi)
    top = math.ceil(hi / step) * step
    return (lambda v: v / top), [i * step for i in range(int(round(top / step)) + 1)]


def label(v):
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3 and v % 1e3 == 0:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--title", required=True)
    p.add_argument("--x-label", required=True)
    p.add_argument("--y-label", required=True)
    p.add_argument("--log-x", action="store_true")
    p.add_argument("--log-y", action="store_true")
    p.add_argument("--series", action="append", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    series = [parse_series(s) for s in a.series]
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    fx, xticks = axis(xs, a.log_x)
    fy, yticks = axis(ys, a.log_y)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    px = lambda x: LEFT + fx(x) * pw
    py = lambda y: TOP + ph - fy(y) * ph
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(a.title)}</text>',
    ]
    for t in xticks:
        x = px(t)
        svg.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + ph}" stroke="#e4e4e4"/>')
        svg.append(f'<text x="{x:.1f}" y="{TOP + ph + 16}" text-anchor="middle">{label(t)}</text>')
    for t in yticks:
        y = py(t)
        svg.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + pw}" y2="{y:.1f}" stroke="#e4e4e4"/>')
        svg.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{label(t)}</text>')
    svg.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    svg.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 14}" text-anchor="middle">{escape(a.x_label)}</text>')
    svg.append(
        f'<text transform="translate(18 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">{escape(a.y_label)}</text>'
    )
    for i, (name, pts) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        svg.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in pts:
            svg.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{colour}"><title>{label(x)}: {y:g}</title></circle>')
        ly = TOP + 14 + 20 * i
        svg.append(f'<line x1="{LEFT + pw + 14}" y1="{ly - 4}" x2="{LEFT + pw + 34}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
        svg.append(f'<text x="{LEFT + pw + 40}" y="{ly}">{escape(name)}</text>')
    svg.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
