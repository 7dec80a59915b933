#!/usr/bin/env python3
"""PP-OCRv4's recogniser tuned from Python with its own metric: exact text lines.

    bench/.venv/bin/pip install .      # the softneuro package into the bench venv
    bench/.venv/bin/python bench/real/ocr_python_tune.py [--lines 40] [--out FILE.md]

Renders three sets of text lines as bench/real/ocr_accuracy.py does (calibration,
validation with their labels, test), imports the model plainly (its symbolic dims
stay dynamic) and tunes it at 1x3x48x320 twice: float32, and hybrid
(cpu:float32:* + cpu:qint8:*) calibrated on the calibration lines, where a path is
kept only if `exact_lines` (a Python function: lines decoded exactly against the
labels) loses at most --max-drop validation lines against float32. Prints exact
lines on the test set and each model's median latency, both sessions in this
process, interleaved rounds.
"""
import argparse
import os
import random
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ocr_accuracy as ocr  # noqa: E402

import softneuro  # noqa: E402

OUT = "softmax_11.tmp_0"


def samples(rng, n, folder):
    texts, files = ocr.make_set(rng, n, folder)
    return texts, [{"x": np.load(f)} for f in files]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=40)
    ap.add_argument("--max-drop", type=float, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out")
    ap.add_argument("--svg", help="write the hybrid routine path's picture here")
    a = ap.parse_args()
    chars = ocr.dictionary()
    work = tempfile.mkdtemp(prefix="ocr_python_tune.")
    _, cal = samples(random.Random(1), a.lines, os.path.join(work, "cal"))
    val_texts, val = samples(random.Random(3), a.lines, os.path.join(work, "val"))
    test_texts, test = samples(random.Random(2), a.lines, os.path.join(work, "test"))

    def exact_lines(outputs):
        return float(sum(ocr.decode(o[OUT], chars) == t for o, t in zip(outputs, val_texts)))

    m = softneuro.import_onnx(ocr.MODEL)
    shapes = [{"x": (1, 3, 48, 320)}]
    cache = os.path.join(work, "cache")
    t0 = time.time()
    f32 = softneuro.tune(m, shapes=shapes, cache_dir=cache)
    t1 = time.time()
    hybrid = softneuro.tune(m, schemas=["cpu:float32:*", "cpu:qint8:*"], calibration=cal, validation=val,
                            metric=exact_lines, max_drop=a.max_drop, shapes=shapes, cache_dir=cache)
    t2 = time.time()
    print(f"float32 tuned in {t1 - t0:.0f} s; hybrid in {t2 - t1:.0f} s: budget {hybrid.report.accuracy_budget}, "
          f"measured {hybrid.report.accuracy}, missed {hybrid.report.accuracy_missed}", flush=True)
    qint8_layers = sum("qint8" in l["descriptor"] for l in hybrid.report.layers)
    if a.svg:
        hybrid.path_svg(a.svg, title=f"PP-OCRv4 recogniser, hybrid (exact_lines, max_drop {a.max_drop:g}), 1x3x48x320")
    rows = {}
    sessions = {"float32": softneuro.Session(f32, threads=a.threads),
                "hybrid": softneuro.Session(hybrid, threads=a.threads)}
    for name, s in sessions.items():
        got = [ocr.decode(s.run(x)[OUT], chars) for x in test]
        rows[name] = [sum(g == t for g, t in zip(got, test_texts)), []]
    x = test[0]
    for r in range(a.rounds):
        for name in (list(sessions) if r % 2 == 0 else list(reversed(sessions))):
            s = sessions[name]
            s.run(x)
            times = []
            for _ in range(20):
                t = time.perf_counter()
                s.run(x)
                times.append((time.perf_counter() - t) * 1e3)
            rows[name][1].append(statistics.median(times))
    lines = [f"{a.lines} test lines; the hybrid path kept where it loses at most {a.max_drop:g} of {a.lines} "
             f"validation lines (exact_lines, Python); {qint8_layers} of {len(hybrid.report.layers)} layers in qint8",
             "", "| path | exact test lines | median ms (of round medians) |", "|---|---|---|"]
    for name, (exact, ms) in rows.items():
        lines.append(f"| {name} | {exact}/{a.lines} | {statistics.median(ms):.2f} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(f"`{' '.join(sys.argv)}`\n\n{time.strftime('%Y-%m-%d')}, {softneuro.device_fingerprint()}, "
                     f"softneuro {softneuro.version()}\n\n{table}\n")


if __name__ == "__main__":
    main()
