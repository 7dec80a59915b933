#!/usr/bin/env python3
"""LSTM and GRU at the batch and sequence lengths sequence readers run at,
against ONNX Runtime: an ONNX model of one recurrent node (random weights,
bidirectional, biases, initial states) per (operator, batch, steps), imported
with the batch and steps symbolic and run at that shape by the CLI:

    bench/.venv/bin/python bench/real/check_rnn.py [--cli build/softneuro] [--threads N]

Passes where max |diff| <= 1e-4 * max |ORT| + 1e-5 for every output (Y, Y_h,
Y_c). Exit status 1 when any case fails. Cases: batch 32 x 100 steps and
1 x 3,000 steps (issue 51: wrong beyond one GEMM block of rows before
1d3b882), with an input width (256) at which Eigen blocks a few hundred rows.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CASES = [("LSTM", 32, 100), ("GRU", 32, 100), ("LSTM", 1, 3000), ("GRU", 1, 3000)]
INPUT, HIDDEN = 256, 48


def model(op, path, rng):
    gates = 4 if op == "LSTM" else 3
    d = 2
    w = lambda *shape: helper.make_tensor(  # noqa: E731
        "", TensorProto.FLOAT, shape, rng.uniform(-0.15, 0.15, size=shape).astype(np.float32).ravel())
    inits = []
    for name, shape in (("W", (d, gates * HIDDEN, INPUT)), ("R", (d, gates * HIDDEN, HIDDEN)), ("B", (d, 2 * gates * HIDDEN))):
        t = w(*shape)
        t.name = name
        inits.append(t)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "N", INPUT]),
              helper.make_tensor_value_info("h0", TensorProto.FLOAT, [d, "N", HIDDEN])]
    node_inputs = ["x", "W", "R", "B", "", "h0"]
    outputs = ["y", "y_h"]
    if op == "LSTM":
        inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, [d, "N", HIDDEN]))
        node_inputs.append("c0")
        outputs.append("y_c")
    node = helper.make_node(op, node_inputs, outputs, hidden_size=HIDDEN, direction="bidirectional")
    graph = helper.make_graph([node], op.lower(), inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.save(m, path)
    return [i.name for i in inputs], outputs


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(51)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for op, batch, steps in CASES:
            path = os.path.join(tmp, f"{op}.onnx")
            names, outputs = model(op, path, rng)
            dnn = path + ".dnn"
            shapes = [f"x={steps}x{batch}x{INPUT}"] + [f"{n}=2x{batch}x{HIDDEN}" for n in names[1:]]
            subprocess.run([args.cli, "import", path, "-o", dnn] + [a for s in shapes for a in ("--input-shape", s)],
                           check=True, capture_output=True, text=True)
            feeds = {"x": rng.uniform(-1, 1, size=(steps, batch, INPUT)).astype(np.float32)}
            for n in names[1:]:
                feeds[n] = rng.uniform(-0.5, 0.5, size=(2, batch, HIDDEN)).astype(np.float32)
            refs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(outputs, feeds)
            cmd = [args.cli, "run", dnn, "--repeat", "1", "--top", "0"]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            for n, v in feeds.items():
                np.save(os.path.join(tmp, n + ".npy"), v)
                cmd += ["--input", f"{n}={os.path.join(tmp, n + '.npy')}"]
            for o in outputs:
                cmd += ["--output", f"{o}={os.path.join(tmp, o + '.out.npy')}"]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode:
                print(f"{op} batch {batch} x {steps} steps: run failed: {run.stderr.strip()}")
                failed += 1
                continue
            for o, ref in zip(outputs, refs):
                got = np.load(os.path.join(tmp, o + ".out.npy"))
                diff = float(np.max(np.abs(got - ref))) if got.shape == ref.shape else float("inf")
                tol = 1e-4 * float(np.max(np.abs(ref))) + 1e-5
                ok = diff <= tol
                failed += not ok
                print(f"{op} batch {batch} x {steps} steps, {o} {list(ref.shape)}: max |diff| {diff:.2e} "
                      f"(tolerance {tol:.2e})  {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
