"""An RNN written as an ONNX Scan: h' = tanh(x_t W + h U), 1,000 steps, hidden 64,
input 32, and a seeded input. bench/.venv/bin/python bench/loops/make_rnn_scan.py OUT_DIR"""
import sys, os
import numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
rng = np.random.default_rng(0)
H, I, S = 64, 32, 1000
body = h.make_graph(
    [h.make_node("MatMul", ["x_t", "W"], ["xw"]), h.make_node("MatMul", ["h", "U"], ["hu"]),
     h.make_node("Add", ["xw", "hu"], ["pre"]), h.make_node("Tanh", ["pre"], ["h_out"]),
     h.make_node("Identity", ["h_out"], ["y_t"])],
    "body", [h.make_tensor_value_info("h", T.FLOAT, [1, H]), h.make_tensor_value_info("x_t", T.FLOAT, [1, I])],
    [h.make_tensor_value_info("h_out", T.FLOAT, [1, H]), h.make_tensor_value_info("y_t", T.FLOAT, [1, H])])
g = h.make_graph([h.make_node("Scan", ["h0", "x"], ["h", "ys"], body=body, num_scan_inputs=1)], "rnn_scan",
                 [h.make_tensor_value_info("x", T.FLOAT, [S, 1, I])], [h.make_tensor_value_info("h", T.FLOAT, [1, H]), h.make_tensor_value_info("ys", T.FLOAT, [S, 1, H])],
                 [nh.from_array((rng.standard_normal((I, H)) * 0.1).astype(np.float32), "W"),
                  nh.from_array((rng.standard_normal((H, H)) * 0.1).astype(np.float32), "U"),
                  nh.from_array(np.zeros((1, H), np.float32), "h0")])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 16)])
out = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(out, exist_ok=True)
onnx.save(m, os.path.join(out, "rnn_scan.onnx"))
np.save(os.path.join(out, "x.npy"), rng.standard_normal((S, 1, I)).astype(np.float32))
