#!/usr/bin/env python3
"""Draw a rendered Grafana dashboard as a picture, with SAMPLE series: docs/img/gpu-dashboard.png.

    python3 scripts/dashboard-picture.py [--spec examples/p5-training.yaml] [--board gpus]
                                         [--out docs/img/gpu-dashboard.png] [--html FILE]

The dashboard is the renderer's own (clusterforge render of the spec): its rows, panels, grid
positions, titles, units, thresholds and legends are drawn as Grafana lays them out. The series are
made up here (seeded, so the picture is the same every run) and the page says so: no Grafana or
Prometheus is involved. The page is a static HTML file with one SVG per panel; headless Chromium
(Debian's `chromium` package) takes the screenshot. Not part of the test suite or .ci/run.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from clusterforge.clusterspec import parse_spec  # noqa: E402
from clusterforge.render import render_cluster  # noqa: E402

COL = 66  # px per grid column (24 columns)
ROW = 30  # px per grid row, as Grafana
GAP = 8
POINTS = 120  # samples per series (6 h at 3 min)
PALETTE = ["#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9", "#FF9830",
           "#37872D", "#FADE2A", "#1F60C4", "#C4162A"]
COLORS = {"green": "#73BF69", "red": "#F2495C", "blue": "#5794F2", "#EAB839": "#EAB839"}


def load_board(spec_path: Path, board: str) -> tuple[dict[str, Any], list[str], int]:
    import yaml

    spec = yaml.safe_load(spec_path.read_text())
    spec.setdefault("monitoring", {})["grafana"] = True
    result = render_cluster(parse_spec(spec, str(spec_path)), base_dir=spec_path.parent)
    data = json.loads(result.files[f"grafana/{board}.json"].content)
    gpu_hosts = [n for g in result.expect.nodes if g.gpu_count for n in _expand(g.names)]
    gpus = sum(g.gpu_count * len(_expand(g.names)) for g in result.expect.nodes)
    return data, gpu_hosts, gpus


def _expand(hostlist: str) -> list[str]:
    from clusterforge import hostlist as hl

    return list(hl.expand(hostlist))


# ------------------------------------------------------------------------------ sample series


def sample(panel: dict[str, Any], hosts: list[str], rng: random.Random) -> list[tuple[str, list[float]]]:
    """Made-up series for a panel: two hosts x four GPUs where the legend names a GPU."""
    title = panel["title"]
    gpus = [(h, g) for h in hosts[:2] for g in range(4)]
    t = [i / (POINTS - 1) for i in range(POINTS)]

    def wave(base: float, amp: float, noise: float, phase: float) -> list[float]:
        return [base + amp * math.sin(6.3 * x + phase) + rng.gauss(0, noise) for x in t]

    def per_gpu(fn: Any) -> list[tuple[str, list[float]]]:
        return [(f"{h} GPU {g}", fn(i, h, g)) for i, (h, g) in enumerate(gpus)]

    def clamp(v: list[float], lo: float, hi: float) -> list[float]:
        return [min(hi, max(lo, x)) for x in v]

    if title == "GPU utilisation":
        def util(i: int, h: str, g: int) -> list[float]:
            v = wave(92 + i % 4, 1.5, 0.8, i)
            if i == 5:  # one starved GPU of a job: under the dashed 70 % line for the last two hours
                v = [x if k < 80 else 52 + rng.gauss(0, 4) for k, x in enumerate(v)]
            return clamp(v, 0, 100)
        return per_gpu(util)
    if title == "GPU memory used":
        return per_gpu(lambda i, h, g: clamp(wave(72 + i * 2, 1, 0.3, i), 0, 100))
    if title == "Tensor core activity":
        return per_gpu(lambda i, h, g: clamp(wave(58 + i * 1.5 if i != 5 else 33, 2, 0.8, i), 0, 100))
    if title == "Jobs on the GPUs":
        return [("job 41873", [8.0] * POINTS), ("job 41911", [0.0] * 40 + [8.0] * 80)]
    if title == "GPU temperature":
        def temp(i: int, h: str, g: int) -> list[float]:
            v = wave(64 + i * 1.2, 1.2, 0.3, i)
            return [x + (max(0, k - 60) * 0.35 if i == 2 else 0) for k, x in enumerate(v)]  # one runs hot
        return per_gpu(temp)
    if title == "Memory temperature":
        return per_gpu(lambda i, h, g: wave(54 + i * 1.1, 0.8, 0.15, i))
    if title == "Power draw":
        return per_gpu(lambda i, h, g: clamp(wave(610 + i * 9, 18, 4, i), 80, 700))
    if title == "SM clock":
        def clock(i: int, h: str, g: int) -> list[float]:
            v = [1980e6 + rng.gauss(0, 8e6) for _ in t]
            return [x if not (i == 2 and k > 95) else 1590e6 + rng.gauss(0, 2e7) for k, x in enumerate(v)]
        return per_gpu(clock)
    if title == "GPUs per clock-event reason":
        out = []
        for target in panel["targets"]:
            label = target["legendFormat"]
            v = [0.0] * POINTS
            if label == "SW power cap":
                v = [float(max(0, round(2 + 1.5 * math.sin(9 * x) + rng.gauss(0, 0.6)))) for x in t]
            if label == "SW thermal":
                v = [1.0 if k > 95 else 0.0 for k in range(POINTS)]
            out.append((label, v))
        return out
    if title == "Time throttled":
        return [("gpu-001 GPU 2 thermal", [0.0 if k < 95 else 0.18 + rng.gauss(0, 0.02) for k in range(POINTS)]),
                ("gpu-001 GPU 0 power", [max(0.0, 0.05 + 0.04 * math.sin(9 * x)) for x in t])]
    if title == "Xid errors":
        return [(f"{hosts[1]} GPU 6", [math.nan] * 70 + [79.0] + [math.nan] * (POINTS - 71))]
    return []  # panels without samples draw empty (as "No data" in Grafana)


def stat_value(panel: dict[str, Any], gpus: int) -> str:
    return {"GPUs reporting": str(gpus - 1), "Mean utilisation": "91 %", "Job GPUs under 70 %": "1",
            "GPUs clock-limited": "1", "GPUs with an Xid": "1", "Hottest GPU": "84 °C"}.get(panel["title"], "0")


# ------------------------------------------------------------------------------------ drawing


def fmt(v: float, unit: str) -> str:
    if unit == "percent":
        return f"{v:.0f}%"
    if unit == "percentunit":
        return f"{v * 100:.0f}%"
    if unit == "celsius":
        return f"{v:.0f}°C"
    if unit == "watt":
        return f"{v:.0f} W"
    if unit == "hertz":
        return f"{v / 1e9:.2f} GHz"
    return f"{v:.0f}" if abs(v) >= 1 or v == 0 else f"{v:.2f}"


def thresholds(panel: dict[str, Any]) -> list[dict[str, Any]]:
    return list(panel["fieldConfig"]["defaults"]["thresholds"]["steps"])


def _nice(x: float) -> float:
    """A round tick step at or above ``x``: 1, 2, 2.5 or 5 times a power of ten."""
    e = 10 ** math.floor(math.log10(x)) if x > 0 else 1
    return next(m * e for m in (1, 2, 2.5, 5, 10) if m * e >= x)


def svg_timeseries(panel: dict[str, Any], series: list[tuple[str, list[float]]], w: int, h: int) -> str:
    d = panel["fieldConfig"]["defaults"]
    unit = d.get("unit", "short")
    custom = d.get("custom", {})
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    bars = custom.get("drawStyle") == "bars"
    points = custom.get("drawStyle") == "points"
    left, right, top = 58, 10, 8
    legend_h = 18 * min(2, max(1, math.ceil(len(series) / 6))) if series else 0
    bottom = 20 + legend_h
    pw, ph = w - left - right, h - top - bottom
    vals = [x for _, s in series for x in s if not math.isnan(x)]
    if stacked and series:
        sums = [sum(s[i] for _, s in series if not math.isnan(s[i])) for i in range(POINTS)]
        vals = [*sums, 0.0]
    lo = d.get("min", min(vals) if vals else 0.0)
    hi = d.get("max", max(vals) if vals else 1.0)
    if not vals:
        lo, hi = 0.0, 1.0
    if "min" not in d:
        lo = min(lo, 0.0) if unit not in ("celsius", "hertz", "watt") else lo - (hi - lo) * 0.15
    if "max" not in d:
        hi = hi + (hi - lo) * 0.1 or 1.0
    if hi <= lo:
        hi = lo + 1
    step = _nice((hi - lo) / 4)
    if "min" not in d:
        lo = math.floor(lo / step) * step
    if "max" not in d:
        hi = lo + 4 * step if lo + 4 * step >= hi else math.ceil(hi / step) * step

    def y(v: float) -> float:
        return top + ph - (v - lo) / (hi - lo) * ph

    def x(i: int) -> float:
        return left + i / (POINTS - 1) * pw

    out = [f'<svg width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg">']
    for k in range(round((hi - lo) / step) + 1):
        v = lo + step * k
        yy = y(v)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#2c3235"/>')
        out.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end" class="tick">'
                   f'{html.escape(fmt(v, unit))}</text>')
    for k, label in enumerate(["-6h", "-4h30", "-3h", "-1h30", "now"]):
        xx = left + pw * k / 4
        out.append(f'<text x="{xx:.1f}" y="{top + ph + 14}" text-anchor="middle" class="tick">{label}</text>')
    if custom.get("thresholdsStyle", {}).get("mode") == "dashed":
        for step in thresholds(panel)[1:]:
            yy = y(step["value"])
            color = COLORS.get(step["color"], step["color"])
            out.append(f'<line x1="{left}" x2="{left + pw}" y1="{yy:.1f}" y2="{yy:.1f}" '
                       f'stroke="{color}" stroke-dasharray="6,4" stroke-width="1.5"/>')
    base = [0.0] * POINTS
    for n, (_label, s) in enumerate(series):
        color = PALETTE[n % len(PALETTE)]
        if bars:
            bw = max(1.0, pw / POINTS - 1)
            for i, v in enumerate(s):
                if math.isnan(v) or v == 0:
                    continue
                y0, y1 = y(base[i]), y(base[i] + v)
                out.append(f'<rect x="{x(i) - bw / 2:.1f}" y="{y1:.1f}" width="{bw:.1f}" height="{y0 - y1:.1f}" '
                           f'fill="{color}" fill-opacity="0.8"/>')
                base[i] += v
            continue
        if points:
            for i, v in enumerate(s):
                if not math.isnan(v):
                    out.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="4" fill="{color}"/>')
                    out.append(f'<text x="{x(i) + 8:.1f}" y="{y(v) + 4:.1f}" class="tick">Xid {v:.0f}</text>')
            continue
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(s) if not math.isnan(v))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.3"/>')
    if not series:
        out.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle" class="nodata">No data</text>')
    lx, ly = left, top + ph + 32
    for n, (label, _s) in enumerate(series[:12]):
        if lx > w - 150:
            lx, ly = left, ly + 18
        color = PALETTE[n % len(PALETTE)]
        out.append(f'<rect x="{lx}" y="{ly - 8}" width="12" height="4" fill="{color}"/>')
        out.append(f'<text x="{lx + 16}" y="{ly - 3}" class="legend">{html.escape(label)}</text>')
        lx += 20 + 7 * len(label)
    out.append("</svg>")
    return "".join(out)


def stat_html(panel: dict[str, Any], gpus: int) -> str:
    text = stat_value(panel, gpus)
    number = float(re.sub(r"[^0-9.]", "", text) or 0)
    color = thresholds(panel)[0]["color"]
    for step in thresholds(panel):
        if number >= step["value"]:
            color = step["color"]
    return f'<div class="stat" style="color:{COLORS.get(color, color)}">{html.escape(text)}</div>'


def page(board: dict[str, Any], hosts: list[str], gpus: int) -> tuple[str, int]:
    rng = random.Random(16)
    parts = []
    bottom = 0
    for p in board["panels"]:
        g = p["gridPos"]
        left, top = g["x"] * COL, g["y"] * (ROW + GAP) + 96
        w, h = g["w"] * COL - GAP, g["h"] * (ROW + GAP) - GAP
        bottom = max(bottom, top + h)
        style = f"left:{left}px;top:{top}px;width:{w}px;height:{h}px"
        if p["type"] == "row":
            parts.append(f'<div class="row" style="{style}">⌄ {html.escape(p["title"])}</div>')
            continue
        body = stat_html(p, gpus) if p["type"] == "stat" else svg_timeseries(p, sample(p, hosts, rng), w - 2, h - 34)
        tip = html.escape(p["description"])
        parts.append(f'<div class="panel" style="{style}"><div class="title" title="{tip}">'
                     f'{html.escape(p["title"])}</div>{body}</div>')
    variables = " ".join(f'<span class="var"><b>{html.escape(v.get("label", v["name"]))}</b> All</span>'
                         for v in board["templating"]["list"])
    head = (f'<div class="top"><span class="crumb">Dashboards &rsaquo; {html.escape(board["tags"][1])} &rsaquo; '
            f'<b>{html.escape(board["title"])}</b></span>'
            '<span class="sample">SAMPLE DATA: made-up series drawn on the rendered dashboard\'s panels, '
            'not a live cluster</span></div>'
            f'<div class="vars">{variables}<span class="range">Last 6 hours · refresh 30s</span></div>')
    css = """
body{margin:0;background:#111217;font-family:'DejaVu Sans',sans-serif;color:#ccccdc}
.top{position:absolute;left:0;top:0;width:1584px;height:40px;display:flex;justify-content:space-between;
 align-items:center;padding:0 8px;background:#181b1f;border-bottom:1px solid #2c3235}
.crumb{font-size:15px}
.sample{font-size:13px;font-weight:bold;color:#111217;background:#F2CC0C;padding:4px 10px;border-radius:3px}
.vars{position:absolute;left:0;top:48px;width:1584px;height:36px;display:flex;align-items:center;gap:10px;padding:0 8px}
.var{font-size:13px;border:1px solid #2c3235;background:#181b1f;padding:5px 10px;border-radius:2px}
.var b{color:#6e9fff;font-weight:normal;margin-right:8px}.range{margin-left:auto;font-size:13px}
.panel{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:3px;overflow:hidden}
.title{font-size:13px;font-weight:500;padding:7px 10px;height:18px;white-space:nowrap;overflow:hidden}
.row{position:absolute;font-size:15px;font-weight:500;padding-top:6px;color:#d8d9da}
.stat{font-size:40px;font-weight:500;text-align:center;margin-top:6px}
.tick{font-size:11px;fill:#8e8e8e}.legend{font-size:11px;fill:#ccccdc}.nodata{font-size:14px;fill:#8e8e8e}
"""
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><style>{css}</style></head><body>"
           f"{head}{''.join(parts)}</body></html>")
    return doc, bottom + 10


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "p5-training.yaml")
    ap.add_argument("--board", default="gpus")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "gpu-dashboard.png")
    ap.add_argument("--html", type=Path, help="also keep the HTML page here")
    a = ap.parse_args()
    board, hosts, gpus = load_board(a.spec, a.board)
    doc, height = page(board, hosts or ["gpu-001", "gpu-002"], gpus)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(a.html) if a.html else Path(tmp) / "dashboard.html"
        f.write_text(doc)
        if chromium is None:
            print(f"chromium is not installed (apt-get install chromium); the page is {f}", file=sys.stderr)
            return 2
        a.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size=1600,{height}", f"--screenshot={a.out}", f.as_uri()],
                       check=True, capture_output=True, timeout=180, cwd=tmp)
    print(f"{a.out} ({1600}x{height}) from the rendered {a.board}.json of {a.spec.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
