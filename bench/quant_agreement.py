#!/usr/bin/env python3
"""Accuracy of qint8-only nets against their float32 nets, per zoo model.

Run with the bench virtual environment (bench/install-bench-deps.sh makes it),
from the repository root after building the `softneuro` CLI:

    bench/.venv/bin/python bench/quant_agreement.py                      # every zoo model
    bench/.venv/bin/python bench/quant_agreement.py resnet50 --inputs 50 --threads 2

For each MODEL.onnx in the zoo (default bench/models/zoo; made by
bench/models/export_zoo.py, never re-exported here) it runs
    softneuro import MODEL.onnx -o MODEL.dnn
    softneuro tune MODEL.dnn -o MODEL.qint8.dnn --schemas 'cpu:qint8:*'
        (calibration on the tuner's default synthetic batches, then every layer
         in a qint8 routine: a qint8-only net)
    softneuro run MODEL.dnn       --seed S --output NAME=f.npy   (float32, untuned default)
    softneuro run MODEL.qint8.dnn --seed S --output NAME=q.npy   (qint8-only)
for S = 1000 .. 1000+N-1 (seeded N(0,1) inputs, other seeds than calibration's)
and prints per model the cosine similarity of the two outputs (min and mean over
the inputs), the top-1 agreement, and whether it passes (min cosine >= 0.99).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_ZOO = "/work/main/bench/models/zoo" if os.path.isdir("/work/main/bench/models/zoo") else os.path.join(HERE, "models", "zoo")


def sh(cmd, env):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def output_name(cli, dnn, env):
    out = sh([cli, "inspect", dnn], env)
    m = re.search(r"^outputs?:\s*(\S+)", out, re.M)
    if m:
        return m.group(1).split("[")[0].rstrip(",")
    raise RuntimeError(f"cannot find the output name in `softneuro inspect {dnn}`:\n{out[:2000]}")


def model_row(name, a, env, tmp):
    onnx_path = os.path.join(a.zoo, name + ".onnx")
    f32 = os.path.join(tmp, name + ".dnn")
    q8 = os.path.join(tmp, name + ".qint8.dnn")
    t0 = time.time()
    sh([a.cli, "import", onnx_path, "-o", f32], env)
    tune = [a.cli, "tune", f32, "-o", q8, "--schemas", "cpu:qint8:*", "--threads", str(a.threads),
            "--unit-budget-ms", str(a.unit_budget_ms), "--cache", "-", "--report", os.path.join(tmp, name + ".report.txt")]
    sh(tune, env)
    tune_s = time.time() - t0
    out = a.output or output_name(a.cli, f32, env)
    cos, agree = [], 0
    for i in range(a.inputs):
        seed = str(1000 + i)
        ys = []
        for dnn, tag in ((f32, "f"), (q8, "q")):
            y = os.path.join(tmp, f"{name}.{tag}.npy")
            sh([a.cli, "run", dnn, "--seed", seed, "--output", f"{out}={y}", "--repeat", "1", "--top", "0",
                "--threads", str(a.threads)], env)
            ys.append(np.load(y).astype(np.float64).ravel())
        f, q = ys
        denom = np.linalg.norm(f) * np.linalg.norm(q)
        cos.append(float(f @ q / denom) if denom > 0 else 0.0)
        agree += int(np.argmax(f) == np.argmax(q))
    cos = np.array(cos)
    return {"model": name, "min": float(cos.min()), "mean": float(cos.mean()), "top1": agree / a.inputs,
            "n": a.inputs, "tune_s": tune_s, "ok": bool(cos.min() >= 0.99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="model names (default: every .onnx in the zoo)")
    ap.add_argument("--zoo", default=DEFAULT_ZOO)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--inputs", type=int, default=50, help="synthetic inputs per model (default 50)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--unit-budget-ms", type=int, default=5, help="tuning time per candidate (accuracy only: small)")
    ap.add_argument("--output", help="output blob name (default: from softneuro inspect)")
    ap.add_argument("--keep", help="folder to keep the .dnn files and tuning reports in")
    a = ap.parse_args()
    models = a.models or sorted(f[:-5] for f in os.listdir(a.zoo) if f.endswith(".onnx"))
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    rows = []
    print(f"{'model':<22} {'cos min':>8} {'cos mean':>9} {'top-1':>7} {'inputs':>6}  pass")
    for name in models:
        with tempfile.TemporaryDirectory() as t:
            tmp = a.keep or t
            os.makedirs(tmp, exist_ok=True)
            try:
                r = model_row(name, a, env, tmp)
            except RuntimeError as e:
                print(f"{name:<22} error: {e}", flush=True)
                rows.append({"model": name, "ok": False})
                continue
        rows.append(r)
        print(f"{r['model']:<22} {r['min']:8.4f} {r['mean']:9.4f} {100 * r['top1']:6.1f}% {r['n']:6d}  "
              f"{'yes' if r['ok'] else 'NO'}   (import+tune {r['tune_s']:.0f} s)", flush=True)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
