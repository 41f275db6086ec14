#!/usr/bin/env python3
"""Summarises paired benchmark runs (one JSON line per run: side, case, round, rps,
p50_ns, cpu_us) into a Markdown table of medians and ranges, with each side's ratio to
the baseline side taken within the same round, and splices it into BENCHMARKS.md
between <!-- MARKER-begin --> and <!-- MARKER-end -->.

    bench_pairs.py RUNS.jsonl OUT.md MARKER TITLE BASELINE CASE,CASE... SIDE=LABEL...
"""
import json
import pathlib
import statistics
import sys

runs_file, out_file, marker, title, baseline, cases = sys.argv[1:7]
sides = [s.split("=", 1) for s in sys.argv[7:]]
runs = [json.loads(l) for l in pathlib.Path(runs_file).read_text().splitlines() if l.strip()]
base_label = dict(sides)[baseline]


def med(vals, fmt):
    if not vals:
        return "n/a"
    return f"{fmt.format(statistics.median(vals))} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"


lines = [f"| case | side | calls/s | p50 | server CPU per call | calls/s vs {base_label} (same round) | server CPU vs {base_label} |",
         "|---|---|---|---|---|---|---|"]
for case in cases.split(","):
    for side, label in sides:
        sel = [r for r in runs if r["case"] == case and r["side"] == side]
        ratio, cpu_ratio = [], []
        for r in sel:
            base = [x for x in runs if x["case"] == case and x["side"] == baseline and x["round"] == r["round"]]
            if base and base[0]["rps"] > 0:
                ratio.append(r["rps"] / base[0]["rps"])
            if base and base[0]["cpu_us"] > 0:
                cpu_ratio.append(r["cpu_us"] / base[0]["cpu_us"])
        own = side == baseline
        lines.append(f"| {case} | {label} | {med([r['rps'] for r in sel], '{:,.0f}')} | "
                     f"{med([r['p50_ns'] / 1000 for r in sel], '{:.0f} µs')} | {med([r['cpu_us'] for r in sel], '{:.1f} µs')} | "
                     f"{'1' if own else med(ratio, '{:.2f}x')} | {'1' if own else med(cpu_ratio, '{:.2f}x')} |")
text = (f"{title}, {len(set(r['round'] for r in runs))} rounds, this machine, 127.0.0.1; "
        "medians (range).\n\n" + "\n".join(lines) + "\n")
pathlib.Path(out_file).write_text(text)
print(text)
bench = pathlib.Path("BENCHMARKS.md")
begin, end = f"<!-- {marker}-begin -->", f"<!-- {marker}-end -->"
doc = bench.read_text()
if begin in doc and end in doc:
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    bench.write_text(head + begin + "\n" + text + end + tail)
else:
    print(f"(BENCHMARKS.md has no {begin} marker: not spliced)")
