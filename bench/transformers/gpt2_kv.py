#!/usr/bin/env python3
"""GPT-2 (base config, seeded random weights, initializer_range 0.5 so that
tokens differ) with its LM head and KV cache, exported by the TorchScript
exporter (opset 17) as python/tests/data/make_text_models.py exports the tiny
one, imported with no flags; greedy decode of --steps tokens after a prompt,
ours (examples/text/gpt2_decode.py) against ONNX Runtime's on the same file:
the tokens, each step's largest logit difference (relative to the step's
largest logit), and per-step times.

    python bench/transformers/gpt2_kv.py --out /tmp/gpt2kv --steps 64
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "text"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests", "data"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/gpt2kv")
    ap.add_argument("--steps", type=int, default=64)
    a = ap.parse_args()
    import onnxruntime as ort
    import torch
    import transformers as tf
    import make_text_models as mk
    import softneuro
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    cfg = tf.GPT2Config(initializer_range=0.5)
    lm = tf.GPT2LMHeadModel(cfg).eval()
    L, H, D = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head
    names = ["input_ids", "attention_mask"] + [f"past_{i}" for i in range(2 * L)]
    dyn = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "past_sequence + sequence"}}
    dyn.update({f"past_{i}": {0: "batch", 2: "past_sequence"} for i in range(2 * L)})
    args = (torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 4, dtype=torch.int64), *[torch.randn(1, H, 3, D) for _ in range(2 * L)])
    path = os.path.join(a.out, "gpt2_kv.onnx")
    with torch.no_grad():
        torch.onnx.export(mk.LmWithCache(lm), args, path, input_names=names,
                          output_names=["logits"] + [f"present_{i}" for i in range(2 * L)], dynamic_axes=dyn,
                          opset_version=17, dynamo=False)
    prompt = [464, 3290, 318, 257]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    t0 = time.time()
    want = mk.greedy(sess, np.array([prompt], np.int64), a.steps, L, H, D)
    ort_s = time.time() - t0
    t0 = time.time()
    model = softneuro.import_onnx(path)
    print(f"imported with no flags in {time.time() - t0:.1f} s; attention_mask {model.inputs[1].shape}")
    import gpt2_decode
    times = []
    t0 = time.time()
    got = gpt2_decode.decode(model, prompt, a.steps, lambda step, ms: times.append(ms))
    ours_s = time.time() - t0
    same = sum(x == y for x, y in zip(got, want))
    print(f"tokens equal to ONNX Runtime's: {same} of {a.steps}{' (all)' if same == a.steps else ''}")
    print(f"decode of {a.steps} steps: ours {ours_s:.2f} s (median step {np.median(times[1:]):.1f} ms, "
          f"first {times[0]:.1f} ms), ONNX Runtime {ort_s:.2f} s")
    sys.exit(0 if same == a.steps else 1)


if __name__ == "__main__":
    main()
