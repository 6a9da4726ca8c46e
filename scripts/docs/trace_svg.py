#!/usr/bin/env python3
"""Draws a Chrome trace-event JSON file (what davinci-workload --trace, davinci-smi trace,
Device::trace, davinci_trace_stop and davinci.trace write) as an SVG timeline, for the docs:
a track per host thread and per device stream, task slices coloured by name, chunks of long
tasks as thin bars under their task, and the flow arrows from event records to the waits they
released. The same tracks and arrows the Perfetto UI shows; no browser needed.

usage: trace_svg.py TRACE.json OUT.svg [--from-ms T] [--window-ms W] [--width PX]
"""

import argparse
import colorsys
import hashlib
import html
import json
import sys

PALETTE_SEED = "davinci"


def colour(name):
    h = int(hashlib.sha1((PALETTE_SEED + name.split(" chunk")[0]).encode()).hexdigest()[:6], 16)
    r, g, b = colorsys.hls_to_rgb((h % 360) / 360.0, 0.62, 0.55)
    return "#%02x%02x%02x" % (int(r * 255), int(g * 255), int(b * 255))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from-ms", type=float, default=None, help="window start, ms from the first slice")
    ap.add_argument("--window-ms", type=float, default=None, help="window length in ms (default: all)")
    ap.add_argument("--width", type=int, default=1500)
    a = ap.parse_args()
    with open(a.trace, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    slices = [e for e in events if e.get("ph") == "X"]
    if not slices:
        sys.exit("trace_svg: no slices in %s" % a.trace)
    t0 = min(e["ts"] for e in slices)
    start = t0 + (a.from_ms or 0.0) * 1000.0
    end = max(e["ts"] + e.get("dur", 0) for e in slices)
    if a.window_ms:
        end = min(end, start + a.window_ms * 1000.0)
    span = max(end - start, 1e-3)
    # Tracks: host threads first, then device streams, in the order they appear.
    order = []
    for e in sorted(slices, key=lambda e: (procs.get(e["pid"], "").endswith("device"), e["pid"], e["tid"])):
        k = (e["pid"], e["tid"])
        if k not in order:
            order.append(k)
    label_w, row_h, top = 560, 26, 40
    plot_w = a.width - label_w - 20
    height = top + row_h * len(order) + 40
    x = lambda ts: label_w + (ts - start) / span * plot_w
    row = {k: top + i * row_h for i, k in enumerate(order)}
    out = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="monospace" font-size="11">'
        % (a.width, height),
        '<rect width="100%" height="100%" fill="white"/>',
        '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="3" orient="auto">'
        '<path d="M0,0 L7,3 L0,6 z" fill="#333"/></marker></defs>',
        '<text x="10" y="20" font-size="13">%s: %.3f ms from %.3f ms</text>'
        % (html.escape(doc.get("otherData", {}).get("device", "trace") if isinstance(doc, dict) else "trace"),
           span / 1000.0, (start - t0) / 1000.0),
    ]
    for k, y in row.items():
        proc, thread = str(procs.get(k[0], k[0])), str(threads.get(k, k[1]))
        name = thread if proc.endswith("device") else "%s / %s" % (proc, thread)
        out.append('<text x="6" y="%d">%s</text>' % (y + 16, html.escape(name[:90])))
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>' % (label_w, y + row_h, a.width - 20, y + row_h))
    for e in slices:
        s, d = e["ts"], e.get("dur", 0)
        if s + d < start or s > end:
            continue
        y = row[(e["pid"], e["tid"])]
        x0, x1 = max(x(s), label_w), min(x(s + d), a.width - 20)
        w = max(x1 - x0, 0.6)
        chunk = e.get("cat") == "chunk"
        yy, hh = (y + row_h - 7, 5) if chunk else (y + 3, row_h - 11)
        title = "%s %.3f us" % (e["name"], d)
        out.append('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" stroke="%s" stroke-width="0.3"><title>%s</title></rect>'
                   % (x0, yy, w, hh, colour(e["name"]), "#555", html.escape(title)))
        if not chunk and w > 7 * len(e["name"]):
            out.append('<text x="%.1f" y="%d" font-size="10">%s</text>' % (x0 + 2, y + 15, html.escape(e["name"])))
    flows = {}
    for e in events:
        if e.get("ph") in ("s", "f"):
            flows.setdefault(e["id"], {})[e["ph"]] = e
    for f in flows.values():
        if "s" in f and "f" in f:
            s, t = f["s"], f["f"]
            if not (start <= s["ts"] <= end and start <= t["ts"] <= end):
                continue
            ys = row.get((s["pid"], s["tid"]))
            yt = row.get((t["pid"], t["tid"]))
            if ys is None or yt is None:
                continue
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333" stroke-width="1" marker-end="url(#arrow)"/>'
                       % (x(s["ts"]), ys + row_h // 2, x(t["ts"]), yt + row_h // 2))
    for i in range(11):
        tx = label_w + plot_w * i / 10
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/>' % (tx, height - 32, tx, height - 27))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%.3f ms</text>'
                   % (tx, height - 15, (start - t0 + span * i / 10) / 1000.0))
    out.append("</svg>")
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
