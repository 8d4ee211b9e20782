"""Charts as SVG, drawn on the server: no chart library, nothing loaded from elsewhere, and a
page without JavaScript still shows them. Served as ``image/svg+xml`` and shown with ``<img>``,
where an SVG can run no script; every text in it (task types are producer-controlled) is
XML-escaped. Colours are presentation attributes, not inline CSS, so the strict CSP holds.
"""

from __future__ import annotations

import datetime as dt
from xml.sax.saxutils import escape

from taskq.ops.panel import Chart

WIDTH, HEIGHT = 560, 200
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 26, 34
COLOURS = ("#2f7d32", "#c77c02", "#b3261e", "#5b5b5b", "#1f5fa8", "#7b3fa0")


def _nice_max(value: float) -> float:
    """A round upper bound for the y axis (1, 2 or 5 times a power of ten)."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(value))) / 10
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return float(step * magnitude)
    return value


def _label(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.2g}"


def _clock(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%H:%M")


def render(chart: Chart, *, start: float, end: float) -> str:
    """The chart as an SVG document, x from ``start`` to ``end`` (epoch seconds, UTC)."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11" '
        f'data-chart="{escape(chart.key)}">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="15" font-size="13" fill="#222">{escape(chart.title)}'
        f' <tspan fill="#777" font-size="11">({escape(chart.unit)})</tspan></text>',
    ]
    if chart.bars is not None:
        top = _nice_max(max((v for _, v in chart.bars), default=0.0))
        slot = plot_w / max(len(chart.bars), 1)
        for i, (name, value) in enumerate(chart.bars):
            h = plot_h * value / top
            x = LEFT + i * slot + slot * 0.15
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{TOP + plot_h - h:.1f}" '
                f'width="{slot * 0.7:.1f}" height="{h:.1f}" fill="{COLOURS[4]}" '
                f'data-value="{value:.0f}"/>'
            )
            parts.append(
                f'<text x="{x + slot * 0.35:.1f}" y="{HEIGHT - BOTTOM + 14}" '
                f'text-anchor="middle" fill="#444">{escape(name)}</text>'
            )
        parts.append(
            f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle" '
            f'fill="#777">retries before the final outcome</text>'
        )
    else:
        values = [v for s in chart.series for _, v in s.points]
        top = _nice_max(max(values, default=0.0))
        span = max(end - start, 1.0)
        for i, series in enumerate(chart.series):
            if not series.points:
                continue
            colour = COLOURS[i % len(COLOURS)]
            coords = " ".join(
                f"{LEFT + plot_w * (t - start) / span:.1f},{TOP + plot_h - plot_h * v / top:.1f}"
                for t, v in series.points
            )
            parts.append(
                f'<polyline class="series" data-series="{escape(series.name)}" '
                f'data-points="{len(series.points)}" points="{coords}" fill="none" '
                f'stroke="{colour}" stroke-width="1.8"/>'
            )
            if len(series.points) <= 120:  # minutes are few: mark each (one alone is no line)
                parts.extend(
                    f'<circle cx="{xy.split(",")[0]}" cy="{xy.split(",")[1]}" r="2.5" '
                    f'fill="{colour}"/>'
                    for xy in coords.split()
                )
        legend_x = LEFT
        for i, series in enumerate(chart.series):
            colour = COLOURS[i % len(COLOURS)]
            parts.append(
                f'<rect x="{legend_x}" y="{HEIGHT - 12}" width="10" height="3" fill="{colour}"/>'
                f'<text x="{legend_x + 14}" y="{HEIGHT - 8}" fill="#444">'
                f"{escape(series.name)}</text>"
            )
            legend_x += 24 + 7 * len(series.name)
        parts.append(
            f'<text x="{LEFT}" y="{HEIGHT - BOTTOM + 14}" fill="#777">{_clock(start)}</text>'
            f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - BOTTOM + 14}" text-anchor="end" '
            f'fill="#777">{_clock(end)} UTC</text>'
        )
    parts.append(
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}" '
        f'stroke="#999"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#999"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end" fill="#777">{_label(top)}</text>'
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end" fill="#777">0</text>'
    )
    if chart.empty:
        parts.append(
            f'<text x="{LEFT + plot_w / 2:.1f}" y="{TOP + plot_h / 2:.1f}" '
            f'text-anchor="middle" fill="#999">no data in this range</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
