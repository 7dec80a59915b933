#!/usr/bin/env python3
"""GPT-2 (base config, seeded random weights) with its LM head and KV cache, exported by the TorchScript
exporter (opset 17) as python/tests/data/make_text_models.py exports the tiny
one, imported with no flags; greedy decode of --steps tokens after a prompt,
ours (examples/text/gpt2_decode.py) against ONNX Runtime's on the same file:
each step's logits with the same tokens fed (ONNX Runtime's greedy ones: the
largest difference relative to the step's largest logit), the free-running
greedy tokens (a near-tie may go either way, and the rest follows), and the
time of a step at a new cache length against the same step run again.
With --nbits 4 the file first goes through ONNX Runtime's weight-only
quantizer (MatMulNBitsQuantizer: every MatMul with a constant weight becomes a
blockwise MatMulNBits, as LLM files ship), and both run that file.

    python bench/transformers/gpt2_kv.py --out /tmp/gpt2kv --steps 64
    python bench/transformers/gpt2_kv.py --out /tmp/gpt2kv --steps 64 --nbits 4   # needs onnx-ir (install-bench-deps.sh)
"""
import argparse
import inspect
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
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of whole decode loops, ours and ONNX Runtime's")
    ap.add_argument("--init", type=float, default=0.02, help="initializer_range (0.5 makes a chaotic net: PyTorch and ONNX Runtime differ by 97%%)")
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2",
                    help="llama: TinyLlama-1.1B's widths; its projections are MatMuls, which --nbits quantizes (GPT-2's are Gemms)")
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (default: GPT-2's 12, LLaMA 4)")
    ap.add_argument("--nbits", type=int, default=0, help="quantize the weights to MatMulNBits of these bits (2, 4, 8) first")
    ap.add_argument("--block", type=int, default=32, help="MatMulNBits block size")
    ap.add_argument("--symmetric", action="store_true", help="symmetric codes (no zero points)")
    a = ap.parse_args()
    import onnxruntime as ort
    import torch
    import transformers as tf
    import make_text_models as mk
    import softneuro
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    if a.arch == "llama":  # TinyLlama-1.1B's widths (grouped KV heads), fewer layers
        cfg = tf.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=4,
                             num_hidden_layers=a.layers or 4, vocab_size=32000, initializer_range=a.init)
        lm = tf.LlamaForCausalLM(cfg).eval()
        L, H, D = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    else:
        cfg = tf.GPT2Config(initializer_range=a.init, **({"n_layer": a.layers} if a.layers else {}))
        lm = tf.GPT2LMHeadModel(cfg).eval()
        L, H, D = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head
    names = ["input_ids", "attention_mask"] + [f"past_{i}" for i in range(2 * L)]
    dyn = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "past_sequence + sequence"}}
    dyn.update({f"past_{i}": {0: "batch", 2: "past_sequence"} for i in range(2 * L)})
    args = (torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 4, dtype=torch.int64), *[torch.randn(1, H, 3, D) for _ in range(2 * L)])
    path = os.path.join(a.out, f"{a.arch}_kv.onnx")
    # torch before 2.5 (Debian's 1.13) has no dynamo argument: TorchScript is all it exports.
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with torch.no_grad():
        torch.onnx.export(mk.LmWithCache(lm), args, path, input_names=names,
                          output_names=["logits"] + [f"present_{i}" for i in range(2 * L)], dynamic_axes=dyn,
                          opset_version=17, **legacy)
    if a.nbits:
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
        q = MatMulNBitsQuantizer(onnx.load(path), bits=a.nbits, block_size=a.block, is_symmetric=a.symmetric)
        q.process()
        path = os.path.join(a.out, f"{a.arch}_kv_{a.nbits}bit.onnx")
        q.model.save_model_to_file(path, use_external_data_format=False)
        ops = [n.op_type for n in onnx.load(path).graph.node]
        print(f"{path}: {ops.count('MatMulNBits')} MatMulNBits ({a.nbits}-bit, block {a.block}), {ops.count('MatMul')} MatMul left; "
              f"{os.path.getsize(path) / 2**20:.1f} MiB")
    prompt = [464, 3290, 318, 257]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    t0 = time.time()
    want = mk.greedy(sess, np.array([prompt], np.int64), a.steps, L, H, D)
    ort_s = time.time() - t0
    t0 = time.time()
    model = softneuro.import_onnx(path)
    print(f"imported with no flags in {time.time() - t0:.1f} s; attention_mask {model.inputs[1].shape}")
    # The same tokens through both: logits step by step.
    ours = softneuro.Session(model)
    past_ort = [np.zeros((1, H, 0, D), np.float32) for _ in range(2 * L)]
    past_ours = list(past_ort)
    ids, length, worst, new_ms, again_ms, gaps = prompt, 0, 0.0, [], [], []
    for step in range(a.steps):
        length += len(ids)
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, length), np.int64)}
        want_out = sess.run(None, {**feeds, **{f"past_{i}": p for i, p in enumerate(past_ort)}})
        fo = {**feeds, **{f"past_{i}": p for i, p in enumerate(past_ours)}}
        t0 = time.perf_counter()
        got_out = ours.run(fo)
        new_ms.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        ours.run(fo)
        again_ms.append((time.perf_counter() - t0) * 1e3)
        w, g = want_out[0][0, -1], got_out["logits"][0, -1]
        worst = max(worst, float(np.abs(g - w).max() / np.abs(w).max()))
        top2 = np.sort(w)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        past_ort = want_out[1:]
        past_ours = [got_out[f"present_{i}"] for i in range(2 * L)]
        ids = [want[step]]
    print(f"logits with the same tokens, {a.steps} steps: max |ours - ORT| / max |ORT| = {worst:.2e}")
    import gpt2_decode
    got = gpt2_decode.decode(model, prompt, a.steps)
    # Whole decode loops (a new cache length every step), interleaved rounds.
    ours_loop, ort_loop = [], []
    # A fresh session a round, made before the clock starts (a loop still meets a new cache length every
    # step); a pause before each loop: the other engine's threads spin for a while after its run.
    for _ in range(a.rounds):
        time.sleep(0.3)
        t0 = time.perf_counter()
        mk.greedy(sess, np.array([prompt], np.int64), a.steps, L, H, D)
        ort_loop.append((time.perf_counter() - t0) / a.steps * 1e3)
        fresh = softneuro.Session(model)
        time.sleep(0.3)
        t0 = time.perf_counter()
        gpt2_decode.decode(model, prompt, a.steps, session=fresh)
        ours_loop.append((time.perf_counter() - t0) / a.steps * 1e3)
    first = next((k for k, (x, y) in enumerate(zip(got, want)) if x != y), None)
    print(f"free-running greedy tokens equal to ONNX Runtime's: {a.steps if first is None else first} of {a.steps}"
          + ("" if first is None else f" (step {first}: ONNX Runtime's top two logits {gaps[first]:.2e} apart)"))
    print(f"per step: ours at a new cache length {np.median(new_ms[1:]):.1f} ms, the same step again "
          f"{np.median(again_ms[1:]):.1f} ms (medians); ONNX Runtime {ort_s / a.steps * 1e3:.1f} ms")
    print(f"decode loop of {a.steps} steps, {a.rounds} interleaved rounds: ours {np.median(ours_loop):.1f} ms a step, "
          f"ONNX Runtime {np.median(ort_loop):.1f} (medians; ours / ORT {np.median(ours_loop) / np.median(ort_loop):.2f})")
    counts = ours.plan_counts()
    print(f"plans: {counts['built']} built, {counts['rebound']} re-bound to a new cache length (shape buckets)")
    sys.exit(0 if worst <= 1e-4 else 1)


if __name__ == "__main__":
    main()
