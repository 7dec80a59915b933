#!/usr/bin/env python3
"""One decode step's 4-bit layer: a [1, K] x [K, N] MatMul quantised by ONNX Runtime's MatMulNBitsQuantizer
(block 32, zero points), ours against ONNX Runtime on the same file, interleaved rounds in one process.

    PYTHONPATH=<softneuro python> python bench/transformers/nbits_layer.py --out /tmp/nbits [--k 4096 --n 4096]
        [--accuracy-level 4] [--also OLD.dnn ...]

--also: .dnn files of the same layer saved by other builds (e.g. codes a byte each), run beside it.
"""
import argparse, os, time
import numpy as np, onnx, onnxruntime as ort, softneuro
from onnx import helper, TensorProto, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--k", type=int, default=4096)
p.add_argument("--n", type=int, default=4096)
p.add_argument("--accuracy-level", type=int, default=0)
p.add_argument("--rounds", type=int, default=7)
p.add_argument("--also", nargs="*", default=[])
a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
path = os.path.join(a.out, f"nbits_{a.k}x{a.n}_acc{a.accuracy_level}.onnx")
w = (np.random.default_rng(1).standard_normal((a.k, a.n)) * 0.05).astype(np.float32)
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "layer",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, a.k])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, a.n])], [numpy_helper.from_array(w, "w")])
q = MatMulNBitsQuantizer(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), block_size=32, is_symmetric=False,
                         accuracy_level=a.accuracy_level or None)
q.process()
onnx.save(q.model.model, path)
so = ort.SessionOptions(); so.intra_op_num_threads = 2
o = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
x = np.random.default_rng(0).standard_normal((1, 1, a.k)).astype(np.float32)
runs = {"ours": softneuro.Session(softneuro.import_onnx(path))}
runs.update({f"ours ({f})": softneuro.Session(softneuro.load(f)) for f in a.also})
calls = {k: (lambda s=s: s.run({"x": x})["y"]) for k, s in runs.items()}
calls["ONNX Runtime"] = lambda: o.run(None, {"x": x})[0]
ref = calls["ONNX Runtime"]()
for k, f in calls.items():
    print(f"{k}: largest |y - ORT| / largest |ORT| {float(np.abs(f() - ref).max() / np.abs(ref).max()):.2e}")
res = {k: [] for k in calls}
for r in range(a.rounds):
    for k, f in calls.items():
        for _ in range(5): f()
        t = time.perf_counter()
        for _ in range(50): f()
        res[k].append((time.perf_counter() - t) / 50 * 1e3)
for k, v in res.items():
    print(f"{k}: median {np.median(v):.3f} ms, rounds {[round(t, 2) for t in v]}")
