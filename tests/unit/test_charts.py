"""The SVG charts: series become polylines on the time axis, bars a histogram, and every text in
the document (task types are producer-controlled) is escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from taskq.dashboard.charts import render
from taskq.ops.panel import Chart, Series

SVG = "{http://www.w3.org/2000/svg}"


def test_series_are_polylines_across_the_range() -> None:
    chart = Chart(
        "outcomes",
        "finished per minute",
        "tasks/min",
        [Series("success", [(0.0, 1.0), (60.0, 4.0), (120.0, 2.0)]), Series("failed", [])],
    )
    doc = ET.fromstring(render(chart, start=0.0, end=120.0))
    lines = doc.findall(f"{SVG}polyline")
    assert [p.get("data-series") for p in lines] == ["success"]  # no line for an empty series
    xs = [float(pt.split(",")[0]) for pt in lines[0].get("points", "").split()]
    assert xs[0] < xs[1] < xs[2] and xs[-1] - xs[0] > 400  # spans the plot width
    assert "no data" not in render(chart, start=0.0, end=120.0)


def test_a_histogram_has_one_bar_per_retry_count() -> None:
    chart = Chart("retries", "retries", "tasks", [], bars=[("0", 10.0), ("1", 3.0), ("6+", 0.0)])
    doc = ET.fromstring(render(chart, start=0.0, end=60.0))
    bars = doc.findall(f"{SVG}rect[@class='bar']")
    assert [b.get("data-value") for b in bars] == ["10", "3", "0"]
    assert float(bars[0].get("height", 0)) > float(bars[1].get("height", 0)) > 0


def test_hostile_names_are_text_and_empty_charts_say_so() -> None:
    evil = '<script>alert(1)</script>&"'
    chart = Chart("outcomes", f"finished — {evil}", "tasks/min", [Series(evil, [])])
    svg = render(chart, start=0.0, end=60.0)
    doc = ET.fromstring(svg)  # still well-formed XML
    assert not doc.findall(f".//{SVG}script") and "<script>" not in svg
    assert "no data in this range" in svg
