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
(with --hybrid instead: tune MODEL.dnn --schemas 'cpu:float32:*,cpu:qint8:*' under the
 default accuracy budget, top1:0.99, with --calibration on --samples N(0,1) samples (default
 400, seeds 0..: a quarter validate, 100 classifier outputs, what top1:0.99 needs to be
 resolved; the rest calibrate and confirm): a hybrid net that must keep the float32 net's
 top-1 on 99% of the inputs)
for N inputs x drawn from N(0,1) by numpy (seeds 1000 .. 1000+N-1, other values
than calibration's) and prints per model the cosine similarity of the two outputs
(min and mean over the inputs), the top-1 agreement, and whether it passes
(min cosine >= 0.99).

Two more columns say how much agreement the float32 net itself allows:
  "f32, input in int8": the float32 net on x rounded to an int8 grid (asymmetric,
      scale = (max - min) / 255 over 8 N(0,1) batches, as calibration does for
      the input blob) against the float32 net on x: the error of the very first
      quantise step of every qint8 net, with everything after it exact;
  "unrelated": the float32 net's outputs for two different inputs (x_i, x_i+1),
      the cosine that says nothing about agreement.

--latency R: afterwards, per model, R interleaved rounds of
    softneuro run MODEL.dnn --repeat 20 --threads T        (float32-only, untuned default)
    softneuro run MODEL.qint8.dnn --repeat 20 --threads T  (qint8-only)
    ONNX Runtime on a statically quantised QDQ copy of the model (quantize_static:
    per-channel int8 weights, uint8 activations, MinMax on 8 seeded N(0,1) batches),
    20 timed runs after 3 warm-ups, intra_op_num_threads T
and the median over rounds of each round's median (ms) and the float32/qint8 factor.
With --inputs 0 only the latency is measured.
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


def io_names(cli, dnn, env):
    """(input name, input shape, output name) from `softneuro inspect`."""
    out = sh([cli, "inspect", dnn], env)
    i = re.search(r"^input\s+(\S+)\s+\[([0-9,]+)\]", out, re.M)  # "input NAME [1,3,224,224] float32"
    o = re.search(r"^output\s+(\S+)\s+\[", out, re.M)
    if i and o:
        return i.group(1), [int(d) for d in i.group(2).split(",")], o.group(1)
    raise RuntimeError(f"cannot find the input/output names in `softneuro inspect {dnn}`:\n{out[:2000]}")


def int8_grid(shape):
    """The input's asymmetric int8 grid as calibration makes it: [min, max] (with 0)
    over 8 batches of N(0,1) values, scale = (max - min) / 255."""
    lo = hi = 0.0
    for s in range(8):
        v = np.random.default_rng(s).standard_normal(shape)
        lo, hi = min(lo, float(v.min())), max(hi, float(v.max()))
    scale = (hi - lo) / 255.0
    zp = float(np.clip(np.round(-128.0 - lo / scale), -128, 127))
    return scale, zp


def cosine(a, b):
    d = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / d) if d > 0 else 0.0


def model_row(name, a, env, tmp):
    onnx_path = os.path.join(a.zoo, name + ".onnx")
    f32 = os.path.join(tmp, name + ".dnn")
    q8 = os.path.join(tmp, name + ".qint8.dnn")
    t0 = time.time()
    if not (a.reuse and os.path.exists(f32) and os.path.exists(q8)):
        sh([a.cli, "import", onnx_path, "-o", f32], env)
        budget = a.unit_budget_ms if a.unit_budget_ms is not None else (30 if a.latency else 5)
        schemas = "cpu:float32:*,cpu:qint8:*" if a.hybrid else "cpu:qint8:*"
        tune = [a.cli, "tune", f32, "-o", q8, "--schemas", schemas, "--threads", str(a.threads),
                "--unit-budget-ms", str(budget), "--cache", "-", "--report", os.path.join(tmp, name + ".report.txt")]
        if a.hybrid:
            samples = os.path.join(tmp, name + ".calibration")
            os.makedirs(samples, exist_ok=True)
            in_name, in_shape, _ = io_names(a.cli, f32, env)
            for s in range(a.samples):
                np.save(os.path.join(samples, f"s{s:02d}.npy"), np.random.default_rng(s).standard_normal(in_shape).astype(np.float32))
            tune += ["--calibration", samples]
        sh(tune, env)
    tune_s = time.time() - t0
    in_name, in_shape, out = io_names(a.cli, f32, env)
    out = a.output or out
    if a.inputs == 0:
        return {"model": name, "f32": f32, "q8": q8, "tune_s": tune_s, "ok": True, "n": 0}
    scale, zp = int8_grid(in_shape)

    def run(dnn, x, tag):
        xp, y = os.path.join(tmp, f"{name}.x{tag}.npy"), os.path.join(tmp, f"{name}.{tag}.npy")
        np.save(xp, x)
        sh([a.cli, "run", dnn, "--input", f"{in_name}={xp}", "--output", f"{out}={y}", "--repeat", "1", "--top", "0",
            "--threads", str(a.threads)], env)
        return np.load(y).astype(np.float64).ravel()

    cos, cos_in8, cos_other, agree, prev = [], [], [], 0, None
    for i in range(a.inputs):
        x = np.random.default_rng(1000 + i).standard_normal(in_shape).astype(np.float32)
        x8 = ((np.clip(np.round(x / scale) + zp, -128, 127) - zp) * scale).astype(np.float32)
        f, q, f8 = run(f32, x, "f"), run(q8, x, "q"), run(f32, x8, "f8")
        cos.append(cosine(f, q))
        cos_in8.append(cosine(f, f8))
        if prev is not None:
            cos_other.append(cosine(prev, f))
        prev = f
        agree += int(np.argmax(f) == np.argmax(q))
    cos = np.array(cos)
    report = open(os.path.join(tmp, name + ".report.txt")).read() if os.path.exists(os.path.join(tmp, name + ".report.txt")) else ""
    qint8_layers = len(re.findall(r"^\s*\S+\s+\S+\s+cpu:qint8", report, re.M))
    ok = agree / a.inputs >= 0.99 if a.hybrid else bool(cos.min() >= 0.99)
    return {"model": name, "min": float(cos.min()), "mean": float(cos.mean()), "top1": agree / a.inputs,
            "in8_min": float(np.min(cos_in8)), "in8_mean": float(np.mean(cos_in8)),
            "other": float(np.mean(cos_other)) if cos_other else float("nan"),
            "n": a.inputs, "tune_s": tune_s, "ok": ok, "f32": f32, "q8": q8, "qint8_layers": qint8_layers,
            "summary": "; ".join(l.strip() for l in report.splitlines()
                                 if l.strip().startswith(("accuracy budget", "range method ", "bias correction", "weights stored",
                                                          "(validation", "(met on")))}


def cli_median_ms(cli, dnn, threads, env):
    out = sh([cli, "run", dnn, "--repeat", "20", "--top", "0", "--threads", str(threads)], env)
    return float(re.search(r"median ([0-9.]+) ms", out).group(1))


def ort_qdq(onnx_path, tmp):
    """A QDQ int8 copy of the model (as bench/compare does) and its input name."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    name, shape = sess.get_inputs()[0].name, [d if isinstance(d, int) else 1 for d in sess.get_inputs()[0].shape]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{name: np.random.default_rng(s).standard_normal(shape).astype(np.float32)} for s in range(8)])

        def get_next(self):
            return next(self.it, None)

    pre = os.path.join(tmp, "ort_pre.onnx")
    try:
        from onnxruntime.quantization.shape_inference import quant_pre_process
        quant_pre_process(onnx_path, pre)
    except Exception:
        pre = onnx_path
    out = os.path.join(tmp, "ort_int8.onnx")
    quantize_static(pre, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)
    return out, name, shape


def ort_median_ms(path, name, shape, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = {name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    for _ in range(3):
        sess.run(None, x)
    ts = []
    for _ in range(20):
        t0 = time.perf_counter()
        sess.run(None, x)
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))


def latency(r, a, env, tmp):
    onnx_path = os.path.join(a.zoo, r["model"] + ".onnx")
    try:
        qdq = ort_qdq(onnx_path, tmp)
    except Exception as e:  # ONNX Runtime missing or quantisation failed: our two nets only
        print(f"  (ONNX Runtime QDQ unavailable: {type(e).__name__}: {e})")
        qdq = None
    f, q, o = [], [], []
    for _ in range(a.latency):
        f.append(cli_median_ms(a.cli, r["f32"], a.threads, env))
        q.append(cli_median_ms(a.cli, r["q8"], a.threads, env))
        if qdq:
            o.append(ort_median_ms(*qdq, a.threads))
    fm, qm = float(np.median(f)), float(np.median(q))
    line = (f"  latency, {a.threads} threads, median of {a.latency} rounds x 20 runs: float32 {fm:.2f} ms, "
            f"qint8 {qm:.2f} ms (x{fm / qm:.2f})")
    if o:
        line += f", ONNX Runtime QDQ int8 {float(np.median(o)):.2f} ms"
    print(line, flush=True)
    print(f"    rounds: float32 {['%.1f' % v for v in f]}, qint8 {['%.1f' % v for v in q]}"
          + (f", ort int8 {['%.1f' % v for v in o]}" if o else ""), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="model names (default: every .onnx in the zoo)")
    ap.add_argument("--zoo", default=DEFAULT_ZOO)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--inputs", type=int, default=50, help="synthetic inputs per model (default 50)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--unit-budget-ms", type=int, default=None,
                    help="tuning time per candidate (default 5 ms, 30 ms with --latency)")
    ap.add_argument("--output", help="output blob name (default: from softneuro inspect)")
    ap.add_argument("--samples", type=int, default=400, help="--hybrid: calibration and validation samples (default 400)")
    ap.add_argument("--hybrid", action="store_true",
                    help="tune hybrid (float32 and qint8) under the default budget with calibration samples; "
                         "pass: top-1 agreement >= 99%%")
    ap.add_argument("--keep", help="folder to keep the .dnn files and tuning reports in")
    ap.add_argument("--reuse", action="store_true", help="with --keep: reuse MODEL.dnn and MODEL.qint8.dnn found there")
    ap.add_argument("--latency", type=int, default=0, metavar="R",
                    help="also time float32, qint8 and ONNX Runtime QDQ int8, R interleaved rounds")
    a = ap.parse_args()
    models = a.models or sorted(f[:-5] for f in os.listdir(a.zoo) if f.endswith(".onnx"))
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    rows = []
    print(f"{'':<22} {'qint8 vs float32':^26} {'f32, input in int8':^19} {'unrelated':>10}")
    print(f"{'model':<22} {'cos min':>8} {'cos mean':>9} {'top-1':>7} {'cos min':>9} {'cos mean':>9} {'cos mean':>10} "
          f"{'inputs':>6}  pass")
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
            if r["n"]:
                print(f"{r['model']:<22} {r['min']:8.4f} {r['mean']:9.4f} {100 * r['top1']:6.1f}% {r['in8_min']:9.4f} "
                      f"{r['in8_mean']:9.4f} {r['other']:10.4f} {r['n']:6d}  {'yes' if r['ok'] else 'NO'}   "
                      f"(import+tune {r['tune_s']:.0f} s)", flush=True)
                if a.hybrid:
                    print(f"    {r['qint8_layers']} layers in qint8; {r['summary']}", flush=True)
            if a.latency:
                latency(r, a, env, tmp)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
