#!/usr/bin/env python3
"""Imports each zoo model with softneuro and checks it against ONNX Runtime.

Run with the bench virtual environment (bench/install-bench-deps.sh makes it):

    bench/.venv/bin/python bench/check_zoo.py                   # every model in bench/models/zoo
    bench/.venv/bin/python bench/check_zoo.py resnet50 --cli build/softneuro

For each MODEL.onnx (with MODEL.input.npy beside it, from export_zoo.py) it runs
    softneuro import MODEL.onnx -o MODEL.dnn
    softneuro run MODEL.dnn --input NAME=MODEL.input.npy --output NAME=... --repeat 1
and ONNX Runtime (CPU) on the same input, and prints per model the import time,
the max abs difference, the relative difference (max abs diff / max |ORT output|),
the output's standard deviation, and whether it passes:
    max abs diff <= 1e-4 * max |ORT output| + 1e-5
Exit status 1 when a model fails to import, run, or match.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def check(name, zoo, cli, threads):
    onnx_path = os.path.join(zoo, name + ".onnx")
    x = np.load(os.path.join(zoo, name + ".input.npy"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    in_name, out_name = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    expected = sess.run([out_name], {in_name: x})[0]

    row = {"model": name}
    with tempfile.TemporaryDirectory() as tmp:
        dnn = os.path.join(tmp, name + ".dnn")
        t0 = time.time()
        r = subprocess.run([cli, "import", onnx_path, "-o", dnn], capture_output=True, text=True)
        wall = time.time() - t0
        if r.returncode != 0:
            row["error"] = "import failed: " + (r.stderr.strip() or r.stdout.strip())
            return row
        m = re.search(r"in ([0-9.]+) ms", r.stdout)
        row["import_s"] = float(m.group(1)) / 1000 if m else wall
        row["import_wall_s"] = wall
        y_path = os.path.join(tmp, "y.npy")
        r = subprocess.run([cli, "run", dnn, "--input", f"{in_name}={os.path.join(zoo, name + '.input.npy')}",
                            "--output", f"{out_name}={y_path}", "--repeat", "1", "--top", "0",
                            "--threads", str(threads)], capture_output=True, text=True)
        if r.returncode != 0:
            row["error"] = "run failed: " + (r.stderr.strip() or r.stdout.strip())
            return row
        got = np.load(y_path)
    if got.shape != expected.shape:
        row["error"] = f"output shape {got.shape}, ONNX Runtime gives {expected.shape}"
        return row
    diff = float(np.abs(got.astype(np.float64) - expected).max())
    scale = float(np.abs(expected).max())
    row.update(max_abs=diff, rel=diff / scale if scale else diff, std=float(expected.std()),
               ok=diff <= 1e-4 * scale + 1e-5)
    ref_path = os.path.join(zoo, name + ".output.npy")
    if os.path.exists(ref_path):  # PyTorch's own output, for information
        row["torch_abs"] = float(np.abs(got - np.load(ref_path)).max())
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="model names (default: every .onnx in the zoo)")
    ap.add_argument("--zoo", default=os.path.join(HERE, "models", "zoo"))
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    names = args.models or sorted(f[:-5] for f in os.listdir(args.zoo) if f.endswith(".onnx"))
    if not names:
        sys.exit(f"no models in {args.zoo}: run bench/models/export_zoo.py first")
    print(f"{'model':22s} {'import s':>8s} {'max abs diff':>12s} {'rel diff':>9s} {'output std':>10s} "
          f"{'vs torch':>9s}  result", flush=True)
    bad = 0
    for name in names:
        try:
            row = check(name, args.zoo, args.cli, args.threads)
        except Exception as e:  # ONNX Runtime refusing a model, a missing file...
            row = {"model": name, "error": f"{type(e).__name__}: {e}"}
        if "error" in row:
            bad += 1
            first = row["error"].splitlines()
            print(f"{name:22s} FAIL {first[0]}" + "".join("\n" + " " * 28 + l for l in first[1:12]), flush=True)
            continue
        bad += not row["ok"]
        print(f"{name:22s} {row['import_s']:8.3f} {row['max_abs']:12.3e} {row['rel']:9.2e} {row['std']:10.4g} "
              f"{row.get('torch_abs', float('nan')):9.2e}  {'ok' if row['ok'] else 'MISMATCH'}", flush=True)
    print(f"{len(names) - bad}/{len(names)} models import and match ONNX Runtime")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
