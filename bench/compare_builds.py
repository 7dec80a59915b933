#!/usr/bin/env python3
"""Tuned latency of two builds, same run: does a change leave tuning's result alone?

For the bundled demo and the zoo (bench/models/zoo), each build imports and tunes the model
itself (float32, no profile cache), then the two tuned files are timed in separate fresh
`softneuro run` processes of their own build, interleaved round by round (order alternated).

    bench/compare_builds.py --before OLD/build/softneuro --after build/softneuro \\
        [--models demo,mobilenet_v2,...] [--rounds 5] [--repeat N] [--out FILE.md]

Prints (and with --out writes) a table: per model, each build's median of the per-round
medians and their ratio. Standard library only.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = ["mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "resnet50", "vgg16"]


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def tuned_file(cli, model, work, tag):
    src = os.path.join(os.path.dirname(os.path.abspath(cli)), "models/demo.dnn") if model == "demo" else None
    if src is None:
        src = os.path.join(work, f"{model}.{tag}.dnn")
        sh([cli, "import", os.path.join(ROOT, "bench/models/zoo", f"{model}.onnx"), "-o", src])
    out = os.path.join(work, f"{model}.{tag}.tuned.dnn")
    sh([cli, "tune", src, "-o", out, "--cache", "-", "--report", out + ".txt"])
    return out


def median_ms(cli, path, repeat):
    text = sh([cli, "run", path, "--repeat", str(repeat)])
    m = re.search(r"median ([0-9.]+) ms", text)
    if not m:
        sys.exit(f"no median in the output of {cli} run {path}:\n{text[-1000:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--models", default=",".join(["demo"] + ZOO))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=0, help="runs per process; default: about 0.5 s of the model, 10 to 500")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for model in a.models.split(","):
            files = {tag: tuned_file(cli, model, work, tag) for tag, cli in (("before", a.before), ("after", a.after))}
            repeat = a.repeat or max(10, min(500, int(500 / median_ms(a.before, files["before"], 10))))
            times = {"before": [], "after": []}
            for r in range(a.rounds):
                order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                for tag in order:
                    times[tag].append(median_ms(getattr(a, tag), files[tag], repeat))
            b, f = statistics.median(times["before"]), statistics.median(times["after"])
            rows.append((model, b, f, f / b, times))
            print(f"{model}: before {b:.3f} ms, after {f:.3f} ms, after/before {f / b:.3f}", flush=True)
    lines = ["| model | before (ms) | after (ms) | after / before | rounds before | rounds after |",
             "|---|---|---|---|---|---|"]
    for model, b, f, ratio, t in rows:
        fmt = lambda v: " ".join(f"{x:.3f}" for x in v)
        lines.append(f"| {model} | {b:.3f} | {f:.3f} | {ratio:.3f} | {fmt(t['before'])} | {fmt(t['after'])} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(f"`{' '.join(sys.argv)}`\n\n{table}\n")


if __name__ == "__main__":
    main()
