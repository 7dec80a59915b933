#!/usr/bin/env python3
"""One transformer, ours against ONNX Runtime, same process, interleaved:

    python bench/transformers/peer_speed.py MODEL.onnx [MODEL.dnn ...] [--rounds 5] [--runs 5] [--seq 128] [--past 127]

Our model is each MODEL.dnn given (imported or tuned before: a float32-tuned
and a hybrid file in the same rounds), else MODEL.onnx imported with no flags;
ratios are against the first. Inputs by name: input_ids (ids below 1000) and
attention_mask (the last quarter 0: padded) of [1, seq]; pixel_values
[1,3,224,224]; input_features [1,80,3000]; a KV-cache decode step (GPT-2 as
bench/transformers/gpt2_kv.py exports it) with --past P: one new token,
past_i [1, heads, P, head_dim] of seeded values, the mask all ones.
ONNX Runtime runs with all graph optimisations and 2 intra-op threads, ours
with 2 threads. Each round times each runtime after a 0.5 s pause and two
warm-ups (ONNX Runtime's threads spin after a run: timed right after it ours
was up to 1.7x slower), the median of --runs runs; the figures are the
medians of the rounds. Prints the max error against ONNX Runtime too.
"""
import argparse
import time

import numpy as np
import onnxruntime as ort
import softneuro


def feeds_for(sess, seq, past, rng):
    feeds = {}
    for i in sess.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, 1000, (1, 1 if past else seq)).astype(np.int64)
        elif i.name == "attention_mask":
            m = np.ones((1, past + 1 if past else seq), np.int64)
            if not past:
                m[0, -seq // 4:] = 0
            feeds[i.name] = m
        elif i.name == "pixel_values":
            feeds[i.name] = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        elif i.name == "input_features":
            feeds[i.name] = rng.standard_normal((1, 80, 3000)).astype(np.float32)
        elif i.name.startswith("past_"):
            heads, dim = i.shape[1], i.shape[3]
            feeds[i.name] = (rng.standard_normal((1, heads, past, dim)) * 0.5).astype(np.float32)
        else:
            raise SystemExit(f"no input of this script is named {i.name}")
    return feeds


def timed(fn, runs):
    time.sleep(0.5)
    fn()
    fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("onnx")
    ap.add_argument("dnn", nargs="*")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--past", type=int, default=0, help="a decode step at this cache length")
    ap.add_argument("--openvino", action="store_true",
                    help="OpenVINO too, at f32 and at its default precision (bfloat16 on AVX512_BF16/AMX CPUs)")
    a = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(a.onnx, so, providers=["CPUExecutionProvider"])
    feeds = feeds_for(sess, a.seq, a.past, np.random.default_rng(0))
    want = sess.run(None, feeds)[0]
    contenders = {"ONNX Runtime": lambda: sess.run(None, feeds)}
    first = None
    for path in a.dnn or [None]:
        ours = softneuro.Session(softneuro.load(path) if path else softneuro.import_onnx(a.onnx), threads=2)
        name = f"ours {path}" if path else "ours"
        first = first or name
        got = ours.run(feeds)[sess.get_outputs()[0].name]
        err = float(np.abs(got - want).max() / np.abs(want).max())
        cos = float(np.dot(got.ravel(), want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want))
        print(f"{name}: max |ours - ORT| / max |ORT| = {err:.2e}, cosine {cos:.5f}")
        contenders[name] = lambda s=ours: s.run(feeds)
    if a.openvino:
        import openvino as ov
        core = ov.Core()
        ov_model = core.read_model(a.onnx)
        for hint in ("f32", "default"):
            cfg = {"INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY"}
            if hint == "f32":
                cfg["INFERENCE_PRECISION_HINT"] = "f32"
            compiled = core.compile_model(ov_model, "CPU", cfg)
            name = f"OpenVINO {hint} ({compiled.get_property('INFERENCE_PRECISION_HINT')})"
            request = compiled.create_infer_request()
            contenders[name] = lambda r=request: r.infer(feeds)
    times = {k: [] for k in contenders}
    for _ in range(a.rounds):
        for k, fn in contenders.items():
            times[k].append(timed(fn, a.runs))
    u = float(np.median(times[first]))
    for k, v in times.items():
        m = float(np.median(v))
        print(f"{k}: {m:.1f} ms (median of {a.rounds} rounds: {' '.join(f'{t:.1f}' for t in v)}); "
              f"its time / {first} = {m / u:.2f}x")


if __name__ == "__main__":
    main()
