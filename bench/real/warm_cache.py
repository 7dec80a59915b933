#!/usr/bin/env python3
"""Does a warm profile cache lead the tuner to a slower path than a cold one? (issue 83)

    python3 bench/real/warm_cache.py [--cli build/softneuro] [--rounds 5]

PP-OCRv4's recogniser (1x3x48x320) with 64 rendered calibration lines, schemas
cpu:float32:* + cpu:qint8:* + cpu:bfloat16:*:
  cold   tuned with no cache (--cache -);
  fill   a cache folder filled by other tunings of the same model: float32 only,
         float32 + qint8 with the same lines, float32 + bfloat16 with the same lines,
         the three schemas without samples, and the three schemas with other lines
         (another calibration: other quantisation);
  warm   the cold tuning's command on that cache.
Prints each tuning's time, prediction and cache counts, then both files' median latency
(fresh `softneuro run` processes, interleaved rounds) in the same run. Needs PIL and onnx
(bench/real/ocr_accuracy.py renders the lines) and the model from shared/real-models.
"""
import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ocr_accuracy import MODEL, ROOT, THREE, make_set  # noqa: E402


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout + r.stderr


def tune(cli, base, out, cache, extra):
    t0 = time.time()
    log = sh([cli, "tune", base, "-o", out, "--cache", cache, "--report", out + ".txt"] + extra)
    secs = time.time() - t0
    with open(out + ".log", "w") as f:  # the tuner's log, beside its report
        f.write(log)
    report = open(out + ".txt").read()
    predicted, measured = re.search(r"predicted \(DPRS[^)]*\) ([0-9.]+) ms, measured ([0-9.]+) ms", report).groups()
    cache_line = re.search(r"tuned in .*", report).group(0)
    earlier = re.search(r"(\d+) paths? earlier tunings kept measured beside it, the fastest ([0-9.]+) ms(: taken)?", report)
    if earlier:
        cache_line += f"; {earlier.group(1)} earlier path(s) measured beside it ({earlier.group(2)} ms{', taken' if earlier.group(3) else ''})"
    return secs, float(predicted), float(measured), cache_line


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/softneuro"))
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} missing: run shared/real-models/fetch.sh")
    work = tempfile.mkdtemp(prefix="warm_cache.")
    make_set(random.Random(1), 64, os.path.join(work, "lines"))
    make_set(random.Random(3), 64, os.path.join(work, "other_lines"))
    base = os.path.join(work, "rec.dnn")
    sh([a.cli, "import", MODEL, "-o", base, "--input-shape", "x=1x3x48x320"])
    lines = ["--calibration", os.path.join(work, "lines")]
    command = ["--schemas", THREE] + lines
    cache = os.path.join(work, "cache")
    rows = []
    rows.append(("cold", *tune(a.cli, base, os.path.join(work, "cold.dnn"), "-", command)))
    print(rows[-1], flush=True)
    fills = [["--schemas", "cpu:float32:*"],
             ["--schemas", "cpu:float32:*,cpu:qint8:*"] + lines,
             ["--schemas", "cpu:float32:*,cpu:bfloat16:*"] + lines,
             ["--schemas", THREE],
             ["--schemas", THREE, "--calibration", os.path.join(work, "other_lines")]]
    for k, extra in enumerate(fills):
        rows.append((f"fill {k + 1}: {' '.join(extra[:2])}{' + lines' if len(extra) > 2 else ''}",
                     *tune(a.cli, base, os.path.join(work, f"fill{k}.dnn"), cache, extra)))
        print(rows[-1], flush=True)
    rows.append(("warm", *tune(a.cli, base, os.path.join(work, "warm.dnn"), cache, command)))
    print(rows[-1], flush=True)
    x = os.path.join(work, "lines", "line000.npy")
    ms = {"cold": [], "warm": []}
    for r in range(a.rounds):
        for name in (["cold", "warm"] if r % 2 == 0 else ["warm", "cold"]):
            text = sh([a.cli, "run", os.path.join(work, f"{name}.dnn"), "--input", f"x={x}", "--repeat", "30"])
            ms[name].append(float(re.search(r"median ([0-9.]+) ms", text).group(1)))
    print("\n| tuning | seconds | predicted ms | measured ms (tuner) | cache |\n|---|---|---|---|---|")
    for name, secs, predicted, measured, cache_line in rows:
        print(f"| {name} | {secs:.0f} | {predicted:.2f} | {measured:.2f} | {cache_line} |")
    print(f"\nmedian of {a.rounds} interleaved rounds of 30 runs: cold {statistics.median(ms['cold']):.3f} ms, "
          f"warm {statistics.median(ms['warm']):.3f} ms (warm/cold {statistics.median(ms['warm']) / statistics.median(ms['cold']):.3f})")


if __name__ == "__main__":
    main()
