#!/usr/bin/env python3
"""Transformers quantised by ONNX Runtime's quantize_dynamic (int8 weights,
MatMulInteger; with --exporter ortopt17 after its transformer optimizer:
QAttention, QEmbedLayerNormalization), ours against ONNX Runtime on the same
file, and both on the float32 export, same run, interleaved rounds:

    python bench/transformers/quantize_dynamic_speed.py [--models bert,vit] [--exporter torchscript17]
        [--size base] [--seq 128] [--rounds 5] [--runs 10] [--threads 2] [--cli build/softneuro] [--out /tmp/qdyn]

Each model from bench/transformers/hf_models.py (seeded random weights),
imported with no flags (untuned: the quantised file's dense layers run as
dynamic_quant_dense). ONNX Runtime: all graph optimisations, --threads
intra-op threads, in this process; ours: `softneuro run --repeat RUNS` in a
fresh process each round. Medians of the rounds' medians in ms, and the
largest difference from ONNX Runtime on the quantised file.
"""
import argparse
import os
import re
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402


def ours_ms(cli, dnn, files, runs, threads):
    cmd = [cli, "run", dnn, "--repeat", str(runs), "--threads", str(threads), "--top", "0"]
    for name, path in files.items():
        cmd += ["--input", f"{name}={path}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(re.search(r"median ([0-9.]+) ms", out).group(1))


def ort_ms(sess, feeds, runs):
    for _ in range(2):
        sess.run(None, feeds)
    t = []
    for _ in range(runs):
        a = time.perf_counter()
        sess.run(None, feeds)
        t.append((time.perf_counter() - a) * 1e3)
    return float(np.median(t))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="bert,distilbert,gpt2,vit,whisper-encoder")
    ap.add_argument("--exporter", default="torchscript17")
    ap.add_argument("--size", default="base", choices=["base", "tiny"])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cli", default="build/softneuro")
    ap.add_argument("--out", default="/tmp/qdyn")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print(f"{a.size} models, {a.exporter}, seq {a.seq}, {a.threads} threads, {a.rounds} interleaved rounds of {a.runs} runs; ms")
    print("| model | ONNX Runtime f32 | ours f32 | ONNX Runtime int8 | ours int8 | ours over ONNX Runtime (int8) | max diff (int8) |")
    print("|---|---|---|---|---|---|---|")
    for name in a.models.split(","):
        base = os.path.join(a.out, f"{name}.{a.exporter}.{a.size}")
        kind, vocab, _ = hf_models.export(name, a.size, a.exporter, base + ".onnx")
        hf_models.quantize_dynamic_copy(base + ".onnx", base + ".dq.onnx")
        rng = np.random.default_rng(0)
        feeds = hf_models.inputs_for(kind, vocab, a.seq, False, rng)
        files = {}
        for k, v in feeds.items():
            files[k] = f"{base}.in.{k}.npy"
            np.save(files[k], v)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = a.threads
        opts.log_severity_level = 3
        times = {}
        for tag in ("", ".dq"):
            subprocess.run([a.cli, "import", base + tag + ".onnx", "-o", base + tag + ".dnn"], check=True, capture_output=True)
        sessions = {tag: ort.InferenceSession(base + tag + ".onnx", opts, providers=["CPUExecutionProvider"]) for tag in ("", ".dq")}
        for _ in range(a.rounds):
            for tag in ("", ".dq"):
                times.setdefault("ort" + tag, []).append(ort_ms(sessions[tag], feeds, a.runs))
                time.sleep(0.5)
                times.setdefault("ours" + tag, []).append(ours_ms(a.cli, base + tag + ".dnn", files, a.runs, a.threads))
        ref = sessions[".dq"].run(None, feeds)[0]
        got = hf_models.run_ours(a.cli, base + ".dq.dnn", feeds, a.out, name)
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        m = {k: float(np.median(v)) for k, v in times.items()}
        print(f"| {name} | {m['ort']:.2f} | {m['ours']:.2f} | {m['ort.dq']:.2f} | {m['ours.dq']:.2f} | "
              f"{m['ort.dq'] / m['ours.dq']:.2f}x | {err:.1e} |", flush=True)
        for f in [base + ".onnx", base + ".dq.onnx", base + ".dnn", base + ".dq.dnn"]:
            if os.path.exists(f):
                os.remove(f)


if __name__ == "__main__":
    main()
