#!/usr/bin/env python3
"""Detectors exported with their post-processing (bench/models/export_detection.py):
plain import, then ours against ONNX Runtime on each seeded image, untuned and tuned.

    bench/.venv/bin/python bench/real/detection_check.py [--dir bench/models/detection] [--no-tune]
                                                         [--out bench/results/detection_postprocess.md]

Detections are compared as sets (ties in score may reorder them): each of ONNX
Runtime's (label, box, score) should have one of ours with the same label, the
score within 1e-3 and each box coordinate within 1e-3 of the image size (the
default routines' Winograd convolutions round differently from ONNX Runtime's
direct ones), and the counts must be equal. Where scores nearly tie at a cut
(the 300 best, a level's 1000 candidates, an IoU at the threshold), rounding
decides, and PyTorch and ONNX Runtime differ there too: up to 1% of the
detections may go unmatched (each is listed). Exit status 1 beyond that.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "build", "softneuro")


def run_cli(*args):
    r = subprocess.run([CLI, *args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"softneuro {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def ours(dnn, x, names, work):
    inp = os.path.join(work, "x.npy")
    np.save(inp, x)
    args = ["run", dnn, "--input", f"images={inp}", "--repeat", "1", "--top", "0"]
    for n in names:
        args += ["--output", f"{n}={os.path.join(work, n + '.npy')}"]
    run_cli(*args)
    return {n: np.load(os.path.join(work, n + ".npy")) for n in names}


def match(ref, got, size):
    """How many of ONNX Runtime's detections have one of ours, and the first that has none."""
    used = np.zeros(len(got["scores"]), bool)
    matched, first = 0, ""
    for i in range(len(ref["scores"])):
        ok = ((got["labels"] == ref["labels"][i]) & ~used
              & (np.abs(got["scores"] - ref["scores"][i]) <= 1e-3)
              & (np.abs(got["boxes"] - ref["boxes"][i]).max(axis=1) <= 1e-3 * size))
        if ok.any():
            used[np.argmax(ok)] = True
            matched += 1
        elif not first:
            first = f"detection {i} (label {ref['labels'][i]}, score {ref['scores'][i]:.6f})"
    return matched, first


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(ROOT, "bench", "models", "detection"))
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    models = sorted(glob.glob(os.path.join(args.dir, "*.onnx")))
    if not models:
        sys.exit(f"no .onnx in {args.dir}: run /usr/bin/python3 bench/models/export_detection.py first")
    lines = ["| model | file | image | detections | ours (ms) | ONNX Runtime (ms) | matched |", "|---|---|---|---|---|---|---|"]
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        for path in models:
            name = os.path.basename(path)[:-5]
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = args.threads
            sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            names = [o.name for o in sess.get_outputs()]
            dnn = os.path.join(work, name + ".dnn")
            run_cli("import", path, "-o", dnn)
            files = [("plain", dnn)]
            if not args.no_tune:
                tuned = os.path.join(work, name + ".tuned.dnn")
                run_cli("tune", dnn, "-o", tuned, "--threads", str(args.threads))
                files.append(("tuned", tuned))
            for k, inp in enumerate(sorted(glob.glob(os.path.join(args.dir, name + ".input*.npy")))):
                x = np.load(inp)
                t0 = time.perf_counter()
                ref = dict(zip(names, sess.run(None, {"images": x})))
                ref_ms = (time.perf_counter() - t0) * 1e3
                for kind, f in files:
                    t0 = time.perf_counter()
                    got = ours(f, x, names, work)
                    ms = (time.perf_counter() - t0) * 1e3  # (a process, an import of the file and a run)
                    n = len(ref["scores"])
                    matched, first = match(ref, got, max(x.shape[-2:]))
                    bad = len(got["scores"]) != n or n - matched > n // 100
                    failed += bad
                    verdict = "all" if matched == n else f"{matched} of {n}; unmatched first: {first}"
                    if len(got["scores"]) != n:
                        verdict = f"{len(got['scores'])} detections against {n}"
                    lines.append(f"| {name} | {kind} | {k} | {n} | {ms:.0f} (process) | {ref_ms:.0f} | "
                                 f"{'FAILS: ' if bad else ''}{verdict} |")
                    print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Detectors with their post-processing against ONNX Runtime\n\n"
                    "`bench/.venv/bin/python bench/real/detection_check.py` (models from "
                    "`bench/models/export_detection.py`); ours in a process of its own per image (load, plan, run).\n\n")
            f.write("\n".join(lines) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
