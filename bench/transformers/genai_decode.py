#!/usr/bin/env python3
"""A decoder as onnxruntime-genai's model builder writes it (GroupQueryAttention, MatMulNBits, its
`past_key_values.N.key/value` cache), ours against ONNX Runtime on the same file: a generation loop of 32 steps
after an 8-token prompt, ONNX Runtime's greedy tokens fed to both, 3 interleaved rounds, medians of the steps;
then prompts of 8, 32 and 128 tokens over an empty cache (time to the first token), 5 interleaved runs each
(a 0.3 s pause before each).

    python -m onnxruntime_genai.models.builder -i HF_FOLDER -o OUT -p int4 -e cpu    # (its own transformers)
    PYTHONPATH=<softneuro python> python bench/transformers/genai_decode.py OUT/model.onnx KV_HEADS HEAD_DIM LAYERS
"""
import sys, time, numpy as np, onnx, onnxruntime as ort, softneuro
path, kv, hd, L = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
steps, rounds = 32, 3
ort_s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
t0 = time.time(); model = softneuro.import_onnx(path); print(f"imported in {time.time()-t0:.1f} s")
ours = softneuro.Session(model)
names = [f"past_key_values.{i}.{w}" for i in range(L) for w in ("key", "value")]
def loop(run, tokens):
    past = {n: np.zeros((1, kv, 0, hd), np.float32) for n in names}
    ids, total, ms, logits = list(range(3, 11)), 0, [], []
    for step in range(steps):
        total += len(ids)
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, total), np.int64), **past}
        t = time.perf_counter(); out = run(feeds); ms.append((time.perf_counter() - t) * 1e3)
        logits.append(out["logits"][0, -1])
        past = {n: out[n.replace("past_key_values", "present")] for n in names}
        ids = [tokens[step] if tokens else int(out["logits"][0, -1].argmax())]
    return ms, logits
outs = [o.name for o in ort_s.get_outputs()]
run_ort = lambda f: dict(zip(outs, ort_s.run(outs, f)))
run_ours = lambda f: ours.run(f)
_, ref = loop(run_ort, None)
tokens = [int(l.argmax()) for l in ref]
o_ms, r_ms = [], []
for r in range(rounds):
    ms, _ = loop(run_ort, tokens); o_ms.append(np.median(ms[1:]))
    ms, got = loop(run_ours, tokens); r_ms.append(np.median(ms[1:]))
worst = max(float(np.abs(g - w).max() / np.abs(w).max()) for g, w in zip(got, ref))
agree = sum(int(g.argmax()) == int(w.argmax()) for g, w in zip(got, ref))
print(f"{path}: logits vs ONNX Runtime: {worst:.2e}, same top token {agree} of {steps}; decode step (median of {rounds} interleaved rounds of {steps} steps): "
      f"ours {np.median(r_ms):.1f} ms, ONNX Runtime {np.median(o_ms):.1f} ms (ORT/ours {np.median(o_ms)/np.median(r_ms):.2f}); rounds ours {[round(x,1) for x in r_ms]} ORT {[round(x,1) for x in o_ms]}")
for P in (8, 32, 128):
    f = {"input_ids": np.arange(3, 3 + P, dtype=np.int64)[None], "attention_mask": np.ones((1, P), np.int64),
         **{n: np.zeros((1, kv, 0, hd), np.float32) for n in names}}
    for _ in range(2): run_ort(f); run_ours(f)
    to, ts = [], []
    for _ in range(5):  # (a pause before each: the other engine's threads spin for a while after its run)
        time.sleep(0.3); t = time.perf_counter(); run_ort(f); to.append(time.perf_counter() - t)
        time.sleep(0.3); t = time.perf_counter(); run_ours(f); ts.append(time.perf_counter() - t)
    print(f"prompt of {P} tokens: ours {np.median(ts) * 1e3:.1f} ms, ONNX Runtime {np.median(to) * 1e3:.1f} ms")
