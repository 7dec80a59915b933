#!/usr/bin/env python3
"""What each engine's users get by default, same run, interleaved: ONNX Runtime
(float32, all graph optimisations), OpenVINO at float32 and OpenVINO at its
default precision (bfloat16 on CPUs with AVX512_BF16 or AMX), against our .dnn
files (untuned, float32-tuned, bfloat16 or hybrid: any number):

    bench/.venv/bin/python bench/compare/default_precision.py MODEL.onnx --dnn A.dnn [--dnn B.dnn ...]
        [--input NAME=FILE.npy ...] [--shape 1x3x224x224] [--threads 2] [--rounds 5] [--runs 30]
        [--peers ort,ov_f32,ov_default]

Inputs: each --input by name (token ids, masks: BERT's int64 inputs), else one
seeded standard normal input of --shape. Each round runs every contender once,
after a 0.3 s pause: the peers in this process (3 warm-up runs, then --runs
timed, the median), ours in a fresh `softneuro run --repeat RUNS` process (its
median). The figures are the medians of the round medians; every round is
printed. Prints OpenVINO's INFERENCE_PRECISION_HINT as it compiled the model.
"""
import argparse
import os
import re
import statistics
import subprocess
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def median_ms(fn, runs):
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("onnx")
    ap.add_argument("--dnn", action="append", default=[])
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy")
    ap.add_argument("--shape", default="1x3x224x224", help="the one input's shape, without --input")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--peers", default="ort,ov_f32,ov_default")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    a = ap.parse_args()

    feeds = {}
    for kv in a.input:
        name, path = kv.split("=", 1)
        feeds[name] = np.load(path)
    peers = [p for p in a.peers.split(",") if p]
    fns, notes = {}, []
    if "ort" in peers:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        s = ort.InferenceSession(a.onnx, so, providers=["CPUExecutionProvider"])
        if not feeds:
            feeds = {s.get_inputs()[0].name: np.random.default_rng(0).standard_normal(
                [int(d) for d in a.shape.split("x")]).astype(np.float32)}
        fns["ONNX Runtime"] = lambda: s.run(None, feeds)
    if not feeds:
        raise SystemExit("give --input NAME=FILE.npy (or keep ort among --peers for a seeded input of --shape)")
    ov_peers = [p for p in peers if p.startswith("ov_")]
    if ov_peers:
        import openvino as ov
        core = ov.Core()
        model = core.read_model(a.onnx)
        model.reshape({k: list(v.shape) for k, v in feeds.items()})
        for p in ov_peers:
            cfg = {"INFERENCE_NUM_THREADS": a.threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
            if p == "ov_f32":
                cfg["INFERENCE_PRECISION_HINT"] = "f32"
            compiled = core.compile_model(model, "CPU", cfg)
            label = "OpenVINO f32" if p == "ov_f32" else "OpenVINO default"
            notes.append(f"{label}: INFERENCE_PRECISION_HINT {compiled.get_property('INFERENCE_PRECISION_HINT')}")
            request = compiled.create_infer_request()
            fns[label] = (lambda r=request: r.infer(feeds))
    files = []
    for name, value in feeds.items():
        path = f"/tmp/default_precision.{os.getpid()}.{name}.npy"
        np.save(path, value)
        files += ["--input", f"{name}={path}"]

    results = {k: [] for k in list(fns) + a.dnn}
    for _ in range(a.rounds):
        for label, fn in fns.items():
            time.sleep(0.3)
            results[label].append(median_ms(fn, a.runs))
        for dnn in a.dnn:
            time.sleep(0.3)
            out = subprocess.run([a.cli, "run", dnn, "--repeat", str(a.runs), "--top", "0", "--threads", str(a.threads)] + files,
                                 check=True, capture_output=True, text=True).stdout
            results[dnn].append(float(re.search(r"median ([0-9.]+) ms", out).group(1)))
    for n in notes:
        print(n)
    for label, rounds in results.items():
        print(f"{label:48s} {statistics.median(rounds):9.3f} ms   rounds {' '.join(f'{t:.2f}' for t in rounds)}")


if __name__ == "__main__":
    main()
