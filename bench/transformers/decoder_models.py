#!/usr/bin/env python3
"""Decoders as a new user meets them, each built from a tiny config with seeded
random weights, exported by the TorchScript exporter (opset 17), imported with
no flags and compared with ONNX Runtime on the same file and inputs:

- causal language models with their KV cache (llama, mistral with a sliding
  window shorter than the cache, phi, opt, bloom, gpt-neox, codegen,
  persimmon, biogpt, gpt-bigcode with one multi-query cache per layer): a prompt of 4 tokens, then
  one-token steps at cache lengths 1, 5, 17, 40 and 3, every set in one
  `softneuro run` session (shape buckets re-bound, as a decode loop is);
- the decoders of encoder-decoder models (t5, bart, whisper, marian, pegasus)
  with cross-attention over encoder states: 7 tokens over 30 states, 19 over
  77, 1 over 1500.

    python bench/transformers/decoder_models.py --cli build/softneuro --out /tmp/decoders [--models llama,t5,...]

Prints one line per model and input set; exits 1 if any logit is off by more
than 1e-4 of the largest, or a model does not import or run.
"""
import argparse
import inspect
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tests", "data"))
TOL = 1e-4
CAUSAL = ("llama", "mistral", "phi", "opt", "bloom", "gpt-neox", "codegen", "persimmon", "biogpt", "gpt-bigcode")
SEQ2SEQ = ("t5", "bart", "whisper", "marian", "pegasus")


def causal_lm(name):
    import transformers as tf
    dec = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000)
    if name == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**dec, num_key_value_heads=2))
    if name == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(**dec, num_key_value_heads=2, sliding_window=8))
    if name == "phi":
        return tf.PhiForCausalLM(tf.PhiConfig(**dec))
    if name == "opt":
        return tf.OPTForCausalLM(tf.OPTConfig(hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                                              word_embed_proj_dim=64, vocab_size=1000))
    # Partial rotary (gpt-neox, persimmon), interleaved rotary tables split in halves (codegen), learned positions offset by the cache (biogpt).
    if name == "gpt-neox":
        return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(**dec, rotary_pct=0.25))
    if name == "codegen":
        return tf.CodeGenForCausalLM(tf.CodeGenConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=1000))
    if name == "persimmon":
        return tf.PersimmonForCausalLM(tf.PersimmonConfig(**dec, partial_rotary_factor=0.5))
    if name == "gpt-bigcode":  # multi-query: one cache tensor per layer, keys and values side by side
        return tf.GPTBigCodeForCausalLM(tf.GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, multi_query=True))
    if name == "gpt2":  # (gpt2_kv.py checks GPT-2 here; optimum_decoders.py builds it from this)
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000))
    if name == "biogpt":
        return tf.BioGptForCausalLM(tf.BioGptConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                    num_attention_heads=4, vocab_size=1000))
    return tf.BloomForCausalLM(tf.BloomConfig(hidden_size=64, n_layer=2, n_head=4, vocab_size=1000))


def seq2seq_decoder(name):
    import transformers as tf
    sizes = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                 encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000)
    if name == "t5":
        return tf.T5Model(tf.T5Config(d_model=64, num_layers=2, num_heads=4, d_ff=128, d_kv=16, vocab_size=1000)).decoder
    if name == "bart":
        return tf.BartModel(tf.BartConfig(**sizes)).decoder
    if name == "whisper":
        return tf.WhisperModel(tf.WhisperConfig(**sizes, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                decoder_start_token_id=1)).decoder
    if name == "marian":
        return tf.MarianModel(tf.MarianConfig(**sizes, pad_token_id=0, decoder_start_token_id=0)).decoder
    return tf.PegasusModel(tf.PegasusConfig(**sizes)).decoder


def run_ours(cli, dnn, sets, out, work, tag):
    """Every input set in one session; the output `out` of each, in order."""
    cmd = [cli, "run", dnn, "--top", "0", "--repeat", "1", "--output", f"{out}={work}/{tag}.{out}.npy"]
    for name in sets[0]:
        paths = []
        for k, feeds in enumerate(sets):
            p = f"{work}/{tag}.{name}.{k}.npy"
            np.save(p, feeds[name])
            paths.append(p)
        cmd += ["--input", f"{name}=" + ",".join(paths)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc {r.returncode}")
    if len(sets) == 1:
        return [np.load(f"{work}/{tag}.{out}.npy")]
    return [np.load(f"{work}/{tag}.{out}.{k}.npy") for k in range(len(sets))]


def export_causal(name, path):
    import torch
    import make_text_models as mk
    lm = causal_lm(name).eval()
    layers, heads, dim = 2, 4, 16
    kv_heads = getattr(lm.config, "num_key_value_heads", None) or heads

    single = name == "gpt-bigcode"
    caches = layers if single else 2 * layers

    def cache_shape(i, past):  # bloom: keys [batch*heads, dim, past], values [batch*heads, past, dim]
        if name == "bloom":
            return (heads, dim, past) if i % 2 == 0 else (heads, past, dim)
        if single:  # [batch, past, keys and values of the one key/value head]
            return (1, past, 2 * dim)
        return (1, kv_heads, past, dim)

    class LmWithOneCachePerLayer(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, *past):
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=list(past), use_cache=True)
            return (out.logits, *out.past_key_values)

    names = ["input_ids", "attention_mask"] + [f"past_{i}" for i in range(caches)]
    dyn = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "past_sequence + sequence"}}
    for i in range(caches):
        dyn[f"past_{i}"] = ({0: "batch_heads", 2 if i % 2 == 0 else 1: "past_sequence"} if name == "bloom"
                            else {0: "batch", 1: "past_sequence"} if single else {0: "batch", 2: "past_sequence"})
    args = (torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 4, dtype=torch.int64),
            *[torch.randn(*cache_shape(i, 3)) for i in range(caches)])
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with torch.no_grad():
        torch.onnx.export(LmWithOneCachePerLayer(lm) if single else mk.LmWithCache(lm), args, path, input_names=names,
                          output_names=["logits"] + [f"present_{i}" for i in range(caches)], dynamic_axes=dyn,
                          opset_version=17, **legacy)
    rng = np.random.default_rng(0)
    sets = []
    for past in (0, 1, 5, 17, 40, 3):
        seq = 4 if past == 0 else 1
        feeds = {"input_ids": rng.integers(0, 1000, (1, seq), dtype=np.int64),
                 "attention_mask": np.ones((1, past + seq), np.int64)}
        for i in range(caches):
            feeds[f"past_{i}"] = (rng.standard_normal(cache_shape(i, past)) * 0.5).astype(np.float32)
        sets.append((f"cache {past}, {seq} token{'s' if seq > 1 else ''}", feeds))
    return "logits", sets


def export_seq2seq(name, path):
    import torch
    dec = seq2seq_decoder(name).eval()

    class M(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, encoder_hidden_states):
            return self.m(input_ids=input_ids, encoder_hidden_states=encoder_hidden_states)[0]

    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with torch.no_grad():
        torch.onnx.export(M(dec), (torch.randint(0, 1000, (1, 5)), torch.randn(1, 11, 64)), path,
                          input_names=["input_ids", "encoder_hidden_states"], output_names=["y"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                        "encoder_hidden_states": {0: "batch", 1: "encoder_sequence"}},
                          opset_version=17, **legacy)
    rng = np.random.default_rng(0)
    sets = [(f"{seq} tokens over {enc} states", {"input_ids": rng.integers(0, 1000, (1, seq), dtype=np.int64),
                                                   "encoder_hidden_states": rng.standard_normal((1, enc, 64)).astype(np.float32)})
            for seq, enc in ((7, 30), (19, 77), (1, 1500))]
    return "y", sets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/softneuro")
    ap.add_argument("--out", default="/tmp/decoders")
    ap.add_argument("--models", default=",".join(CAUSAL + SEQ2SEQ))
    a = ap.parse_args()
    import onnxruntime as ort
    import torch
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for name in a.models.split(","):
        torch.manual_seed(0)
        onnx_path, dnn = f"{a.out}/{name}.onnx", f"{a.out}/{name}.dnn"
        try:
            out, sets = (export_causal if name in CAUSAL else export_seq2seq)(name, onnx_path)
        except Exception as e:  # noqa: BLE001 - an exporter failure is reported, not ours
            print(f"{name}: export failed: {str(e).splitlines()[0][:200]}")
            continue
        r = subprocess.run([a.cli, "import", onnx_path, "-o", dnn], capture_output=True, text=True)
        if r.returncode:
            print(f"{name}: import FAILED: {r.stderr.strip()[-400:]}")
            bad += 1
            continue
        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        wants = [sess.run([out], feeds)[0] for _, feeds in sets]
        try:
            gots = run_ours(a.cli, dnn, [feeds for _, feeds in sets], out, a.out, name)
        except RuntimeError as e:
            print(f"{name}: run FAILED: {e}")
            bad += 1
            continue
        for (label, _), want, got in zip(sets, wants, gots):
            ok = got.shape == want.shape
            err = float(np.abs(got - want).max() / max(1e-30, float(np.abs(want).max()))) if ok else float("inf")
            ok = ok and err <= TOL
            bad += 0 if ok else 1
            print(f"{name}: {label}: max |ours - ORT| / max |ORT| = {err:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
