#!/usr/bin/env python3
"""Transformers quantised by ONNX Runtime's quantize_dynamic (int8 weights,
MatMulInteger; with --exporter ortopt17 after its transformer optimizer:
QAttention, QEmbedLayerNormalization), ours against ONNX Runtime on the same
file, and both on the float32 export, same run, interleaved rounds:

    python bench/transformers/quantize_dynamic_speed.py [--models bert,vit] [--exporter torchscript17]
        [--size base] [--seq 128] [--rounds 5] [--runs 10] [--threads 2] [--cli build/softneuro] [--out /tmp/qdyn]
        [--openvino]

Each model from bench/transformers/hf_models.py (seeded random weights),
imported with no flags (untuned: the quantised file's dense layers run as
dynamic_quant_dense). ONNX Runtime: all graph optimisations, --threads
intra-op threads, in this process; ours: `softneuro run --repeat RUNS` in a
fresh process each round. Medians of the rounds' medians in ms, and the
largest difference from ONNX Runtime on the quantised file. --openvino adds
OpenVINO on both files (its f32 precision and its default, bfloat16 on
AVX512_BF16/AMX CPUs), in the same rounds: what its users get from the
quantised file.
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


def timed_ms(fn, runs):
    for _ in range(2):
        fn()
    t = []
    for _ in range(runs):
        a = time.perf_counter()
        fn()
        t.append((time.perf_counter() - a) * 1e3)
    return float(np.median(t))


def ort_ms(sess, feeds, runs):
    return timed_ms(lambda: sess.run(None, feeds), runs)


def openvino_requests(path, threads):
    """OpenVINO's infer requests for the file: at f32 and at its default precision."""
    import openvino as ov
    core = ov.Core()
    model = core.read_model(path)
    requests = {}
    for hint in ("f32", "default"):
        cfg = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
        if hint == "f32":
            cfg["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = core.compile_model(model, "CPU", cfg)
        precision = compiled.get_property("INFERENCE_PRECISION_HINT")  # an ov.Type
        name = getattr(precision, "type_name", None) or str(precision)
        requests[f"{hint} ({name})"] = compiled.create_infer_request()
    return requests


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
    ap.add_argument("--openvino", action="store_true", help="OpenVINO too, on both files (f32 and its default precision)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print(f"{a.size} models, {a.exporter}, seq {a.seq}, {a.threads} threads, {a.rounds} interleaved rounds of {a.runs} runs; ms")
    ov_cols = ""
    if a.openvino:
        import openvino as ov
        print(f"OpenVINO {ov.__version__}; its columns: f32 precision on the float32 file, f32 and default precision on the "
              "quantised file")
        ov_cols = " OpenVINO f32 | OpenVINO int8 file f32 | OpenVINO int8 file default |"
    print("| model | ONNX Runtime f32 | ours f32 | ONNX Runtime int8 | ours int8 | ours over ONNX Runtime (int8) | max diff (int8) |"
          + ov_cols)
    print("|---|---|---|---|---|---|---|" + ("---|---|---|" if a.openvino else ""))
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
        ov_requests = {tag: openvino_requests(base + tag + ".onnx", a.threads) for tag in ("", ".dq")} if a.openvino else {}
        for _ in range(a.rounds):
            for tag in ("", ".dq"):
                times.setdefault("ort" + tag, []).append(ort_ms(sessions[tag], feeds, a.runs))
                time.sleep(0.5)
                times.setdefault("ours" + tag, []).append(ours_ms(a.cli, base + tag + ".dnn", files, a.runs, a.threads))
                for hint, r in ov_requests.get(tag, {}).items():
                    if tag == "" and not hint.startswith("f32"):
                        continue
                    times.setdefault(f"ov{tag} {hint}", []).append(timed_ms(lambda r=r: r.infer(feeds), a.runs))
        ref = sessions[".dq"].run(None, feeds)[0]
        got = hf_models.run_ours(a.cli, base + ".dq.dnn", feeds, a.out, name)
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        m = {k: float(np.median(v)) for k, v in times.items()}
        row = (f"| {name} | {m['ort']:.2f} | {m['ours']:.2f} | {m['ort.dq']:.2f} | {m['ours.dq']:.2f} | "
               f"{m['ort.dq'] / m['ours.dq']:.2f}x | {err:.1e} |")
        for prefix in ("ov f32", "ov.dq f32", "ov.dq default"):  # the header's order
            for k in (k for k in m if k.startswith(prefix)):
                row += f" {m[k]:.2f} {k.split(' ', 2)[2]} |"
        print(row, flush=True)
        for f in [base + ".onnx", base + ".dq.onnx", base + ".dnn", base + ".dq.dnn"]:
            if os.path.exists(f):
                os.remove(f)


if __name__ == "__main__":
    main()
