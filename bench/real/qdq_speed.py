#!/usr/bin/env python3
"""A model quantised by ONNX Runtime's quantize_static (QDQ, per-channel int8
weights; bench/real/check_quantized.py's quantize()), untuned: softneuro's
default (the model's own int8 layers on qint8 routines) against the same file
with float32 routines only (`softneuro run --schemas 'cpu:float32:*'`), ONNX
Runtime and OpenVINO (when installed) on the QDQ file, interleaved rounds,
medians; each contender after a 0.5 s pause (the peers' threads spin after a
run: timed right after, ours saw a busy machine, ResNet50 52.8 ms against 34
with the pause on a Zen 4 at AVX2). --isa avx2 caps ours (SOFTNEURO_MAX_CPU_ISA); the peers pick their own
kernels, uncapped.

    bench/.venv/bin/python bench/real/qdq_speed.py resnet50 mobilenet_v2 \\
        ~/.cache/softneuro/real-models/320n.onnx:1x3x320x320 [--threads 2] [--rounds 3] [--runs 20] [--tune]

A zoo name reads bench/models/zoo/NAME.onnx (bench/models/export_zoo.py).
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
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check_quantized  # noqa: E402


def softneuro_ms(cli, dnn, name, npy, threads, runs, schemas=None, isa=None):
    cmd = [cli, "run", dnn, "--input", f"{name}={npy}", "--repeat", str(runs), "--threads", str(threads)]
    if schemas:
        cmd += ["--schemas", schemas]
    env = dict(os.environ, SOFTNEURO_MAX_CPU_ISA=isa) if isa else None
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return float(re.search(r"median ([0-9.]+) ms", out).group(1))


def median_ms(run, runs):
    for _ in range(3):
        run()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def openvino_model(path, threads):
    try:
        import openvino as ov
    except ImportError:
        return None
    try:
        return ov.Core().compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": threads})
    except RuntimeError as e:  # (OpenVINO 2026.4 on a QDQ PP-OCRv4 recogniser: "index '0' out of range")
        why = [line for line in str(e).splitlines() if line.strip()]
        print(f"note: OpenVINO cannot compile {os.path.basename(path)}: {why[-1] if why else e}", file=sys.stderr)
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+", help="zoo name, or PATH.onnx:NxCxHxW")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--isa", help="SOFTNEURO_MAX_CPU_ISA for our runs (e.g. avx2)")
    ap.add_argument("--before", help="another build's CLI: its untuned default too, in the same rounds")
    ap.add_argument("--tune", action="store_true",
                    help="also tune the file (`softneuro tune`, default schemas and budget, no samples) and time it")
    args = ap.parse_args()
    print(f"model | softneuro float32 routines | softneuro untuned default{f' (ISA {args.isa})' if args.isa else ''} | "
          f"{'--before build untuned | ' if args.before else ''}{'softneuro tuned | ' if args.tune else ''}"
          "ONNX Runtime int8 | OpenVINO int8 (same file) | "
          "default vs float32")
    for spec in args.models:
        path, shape = (spec.split(":") + [None])[:2]
        if not path.endswith(".onnx"):
            path = os.path.join(ROOT, "bench", "models", "zoo", path + ".onnx")
        dims = [int(d) for d in shape.split("x")] if shape else None
        with tempfile.TemporaryDirectory() as work:
            files, name, dims = check_quantized.quantize(path, work, dims)
            qdq = files["qdq"]
            dnn = os.path.join(work, "qdq.dnn")
            subprocess.run([args.cli, "import", qdq, "-o", dnn, "--input-shape", f"{name}={'x'.join(map(str, dims))}"],
                           check=True, capture_output=True)
            old_dnn = os.path.join(work, "qdq.before.dnn")
            if args.before:
                subprocess.run([args.before, "import", qdq, "-o", old_dnn, "--input-shape",
                                f"{name}={'x'.join(map(str, dims))}"], check=True, capture_output=True)
            tuned_dnn = os.path.join(work, "qdq.tuned.dnn")
            if args.tune:
                env = dict(os.environ, SOFTNEURO_MAX_CPU_ISA=args.isa) if args.isa else None
                subprocess.run([args.cli, "tune", dnn, "-o", tuned_dnn, "--threads", str(args.threads)], check=True,
                               capture_output=True, env=env)
            x = np.random.default_rng(0).standard_normal(dims, dtype=np.float32)
            npy = os.path.join(work, "x.npy")
            np.save(npy, x)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = args.threads
            opts.log_severity_level = 3
            session = ort.InferenceSession(qdq, opts, providers=["CPUExecutionProvider"])
            ov_model = openvino_model(qdq, args.threads)
            f32, dflt, before, tuned, peer, ovs = [], [], [], [], [], []

            def paused(fn):  # the peers' threads spin after a run: the next contender waits them out
                time.sleep(0.5)
                return fn()

            for _ in range(args.rounds):
                f32.append(paused(lambda: softneuro_ms(args.cli, dnn, name, npy, args.threads, args.runs, "cpu:float32:*", args.isa)))
                dflt.append(paused(lambda: softneuro_ms(args.cli, dnn, name, npy, args.threads, args.runs, None, args.isa)))
                if args.before:
                    before.append(paused(lambda: softneuro_ms(args.before, old_dnn, name, npy, args.threads, args.runs, None, args.isa)))
                if args.tune:
                    tuned.append(paused(lambda: softneuro_ms(args.cli, tuned_dnn, name, npy, args.threads, args.runs, None, args.isa)))
                peer.append(paused(lambda: median_ms(lambda: session.run(None, {name: x}), args.runs)))
                if ov_model is not None:
                    ovs.append(paused(lambda: median_ms(lambda: ov_model([x]), args.runs)))
            a, b, c = np.median(f32), np.median(dflt), np.median(peer)
            d = f"{np.median(ovs):.3f} ms" if ovs else "-"
            e = f"{np.median(before):.3f} ms | " if before else ""
            e += f"{np.median(tuned):.3f} ms | " if tuned else ""
            print(f"{os.path.basename(path)} {'x'.join(map(str, dims))} | {a:.3f} ms | {b:.3f} ms | {e}{c:.3f} ms | {d} | "
                  f"{a / b:.2f}x")


if __name__ == "__main__":
    main()
