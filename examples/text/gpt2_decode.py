#!/usr/bin/env python3
"""Greedy decoding with a KV cache: GPT-2 exported with its cache as inputs
and outputs (input_ids [batch, sequence], attention_mask [batch, past_sequence
+ sequence], past_0 ... past_{2L-1} [batch, heads, past_sequence, head_dim];
logits and present_0 ...), imported with no flags: the prompt in one step,
then one token a step, each step's cache fed to the next.

    python examples/text/gpt2_decode.py gpt2_kv.onnx --prompt 5,17,42,8 --steps 20
    python examples/text/gpt2_decode.py gpt2_kv.onnx --tokenizer tokenizer.json --text "the cat" --steps 20

Prints the tokens (and text, with a tokenizer), then per-step latency and the
process's resident memory at the end of each quarter of the run, and how many
plans the session built: each step meets a new cache length, and past the
session's shape_cache a new length runs a kept plan of its shape bucket
(lengths rounded up to a power of two), so a 1,024-step loop builds a few
dozen plans, not 1,024.
"""
import argparse
import resource
import time

import numpy as np

import softneuro


def decode(model, prompt, steps, on_step=None, session=None):
    """The `steps` greedy tokens after `prompt` (a list of ids), run by
    `session` (default: a new one)."""
    session = session or softneuro.Session(model)
    pasts = [t for t in model.inputs if t.name.startswith("past_")]
    # The cache starts empty: [batch 1, heads, 0 positions, head_dim].
    past = {t.name: np.zeros([1 if i == 0 else 0 if d < 0 else d for i, d in enumerate(t.shape)], np.float32)
            for t in pasts}
    mask = []
    ids, tokens = list(prompt), []
    for step in range(steps):
        mask += [1] * len(ids)
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.array([mask], np.int64), **past}
        t0 = time.perf_counter()
        out = session.run(feeds)
        ms = (time.perf_counter() - t0) * 1e3
        token = int(out["logits"][0, -1].argmax())
        tokens.append(token)
        past = {t.name: out["present_" + t.name[len("past_"):]] for t in pasts}
        ids = [token]
        if on_step:
            on_step(step, ms)
    return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="GPT-2 with a KV cache, .onnx or .dnn")
    ap.add_argument("--prompt", default="5,17,42,8", help="token ids, comma-separated")
    ap.add_argument("--tokenizer", help="a tokenizers JSON file: --text is encoded with it, the tokens decoded")
    ap.add_argument("--text")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    model = softneuro.import_onnx(a.model) if a.model.endswith(".onnx") else softneuro.load(a.model)
    tok = None
    if a.tokenizer:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(a.tokenizer)
    prompt = tok.encode(a.text, add_special_tokens=False).ids if tok and a.text else [int(x) for x in a.prompt.split(",")]
    times = []

    def on_step(step, ms):
        times.append(ms)
        if (step + 1) % max(1, a.steps // 4) == 0:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"step {step + 1}: {ms:.2f} ms, peak resident memory {rss:.1f} MiB")

    session = softneuro.Session(model)
    tokens = decode(model, prompt, a.steps, on_step, session)
    print("tokens:", ",".join(map(str, tokens)))
    if tok:
        print("text:", tok.decode(tokens))
    print(f"median step {np.median(times[1:] if len(times) > 1 else times):.2f} ms")
    counts = session.plan_counts()
    print(f"plans built {counts['built']}, re-bound to a new length {counts['rebound']}")


if __name__ == "__main__":
    main()
