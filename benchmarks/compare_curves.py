#!/usr/bin/env python3
"""Side by side: the evaluations of several training runs (their --metrics files).

    benchmarks/compare_curves.py --svg=OUT.svg --steps-per-epoch=468 \
        "K=2, M=4"=k2.jsonl "K=1, M=1"=k1.jsonl
    benchmarks/compare_curves.py --metric=chrf --svg=OUT.svg gpipe=g.jsonl PyTorch=t.jsonl

Prints a Markdown table with one row per evaluation (the step, the epoch when
--steps-per-epoch is given, each run's metric and held-out loss), then the
largest difference of each run from the first one, and writes the metric as
one SVG chart, a line per run. The metric is the image models' test accuracy
(--metric=accuracy, in %), the translation task's chrF (--metric=chrf) or
the language models' held-out perplexity (--metric=perplexity);
benchmarks/translation_torch.py and lm_torch_train.py write the same records. Standard library only.
"""
import argparse
import html
import json
import math
import sys

COLOURS = ["#1f6fb4", "#d9541e", "#2a9d3a", "#8c3fa8"]
# metric: (record key, scale to the printed unit, axis name, column name, its name in a sentence)
METRICS = {"accuracy": ("accuracy", 100.0, "test accuracy (%)", "accuracy (%)", "accuracy"),
           "chrf": ("chrf", 1.0, "held-out chrF", "chrF", "chrF"),
           "perplexity": ("perplexity", 1.0, "held-out perplexity", "perplexity", "perplexity")}


def read_evals(path, metric):
    key, scale = METRICS[metric][:2]
    evals = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not a JSON line ({e})")
            if row.get("type") == "eval" and row.get(key) is not None:
                evals[int(row["step"])] = (scale * float(row[key]), row.get("loss"))
    if not evals:
        what = {"accuracy": "an accuracy (an image model's --metrics file",
                "chrf": "a chrF (a transformer's --metrics file",
                "perplexity": "a perplexity (a language model's --metrics file"}[metric]
        sys.exit(f"{path}: no evaluation with {what}, from a run with --eval-every)")
    return evals


def svg_chart(runs, steps_per_epoch, title, axis):
    w, h, left, right, top, bottom = 720, 400, 70, 20, 40, 50
    xs = [s for _, ev in runs for s in ev]
    ys = [a for _, ev in runs for a, _ in ev.values()]
    x_scale = steps_per_epoch or 1
    x_max = max(max(xs) / x_scale, 1e-9)
    y_lo = math.floor(min(ys)) if len(ys) > 1 else 0
    y_hi = math.ceil(max(ys)) if max(ys) > y_lo else y_lo + 1

    def px(x):
        return left + (w - left - right) * x / x_max

    def py(y):
        return top + (h - top - bottom) * (1 - (y - y_lo) / (y_hi - y_lo))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{html.escape(title)}</text>']
    step = 1 if y_hi - y_lo <= 10 else 2 if y_hi - y_lo <= 20 else 5
    for y in range(y_lo, y_hi + 1, step):
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{w - right}" y2="{py(y):.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y}</text>')
    for x in sorted({s / x_scale for s in xs}):
        out.append(f'<text x="{px(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">'
                   f'{x:g}</text>')
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">'
               f'{"epoch" if steps_per_epoch else "step"}</text>')
    out.append(f'<text x="16" y="{(top + h - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(top + h - bottom) / 2})">{html.escape(axis)}</text>')
    for i, (label, ev) in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        dash = ' stroke-dasharray="6 4"' if i else ""
        points = " ".join(f"{px(s / x_scale):.1f},{py(a):.1f}"
                          for s, (a, _) in sorted(ev.items()))
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                   f'stroke-width="2"{dash}/>')
        for s, (a, _) in sorted(ev.items()):
            out.append(f'<circle cx="{px(s / x_scale):.1f}" cy="{py(a):.1f}" r="3" '
                       f'fill="{colour}"/>')
        out.append(f'<text x="{left + 12}" y="{top + 18 + 16 * i}" fill="{colour}">{html.escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=METRICS.jsonl")
    ap.add_argument("--svg", help="write the chart here")
    ap.add_argument("--metric", choices=sorted(METRICS), default="accuracy")
    ap.add_argument("--steps-per-epoch", type=int, default=0)
    ap.add_argument("--title", help="the chart's title (default: from --metric)")
    a = ap.parse_args()
    axis, column, name = METRICS[a.metric][2:]
    title = a.title or {"accuracy": "Fashion-MNIST test accuracy",
                        "chrf": "held-out chrF (iso-codes, greedy)",
                        "perplexity": "held-out perplexity"}[a.metric]
    runs = []
    for spec in a.runs:
        label, sep, path = spec.rpartition("=")  # labels may hold '=', paths may not
        if not sep or not label:
            sys.exit(f"'{spec}': expected LABEL=METRICS.jsonl")
        runs.append((label, read_evals(path, a.metric)))
    steps = sorted({s for _, ev in runs for s in ev})
    head = ["step"] + (["epoch"] if a.steps_per_epoch else [])
    for label, _ in runs:
        head += [f"{label} {column}", f"{label} loss"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for s in steps:
        row = [str(s)] + ([f"{s / a.steps_per_epoch:g}"] if a.steps_per_epoch else [])
        for _, ev in runs:
            acc, loss = ev.get(s, (None, None))
            row += [f"{acc:.2f}" if acc is not None else "-",
                    f"{loss:.4f}" if loss is not None else "-"]
        print("| " + " | ".join(row) + " |")
    base_label, base = runs[0]
    for label, ev in runs[1:]:
        common = [s for s in ev if s in base]
        if not common:
            print(f"{label}: no evaluation at the steps of {base_label}")
            continue
        diff = max(abs(ev[s][0] - base[s][0]) for s in common)
        print(f"{label} vs {base_label}: largest {name} difference {diff:.2f} points "
              f"over {len(common)} evaluations")
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg_chart(runs, a.steps_per_epoch, title, axis))
        print(f"wrote {a.svg}")


if __name__ == "__main__":
    main()
