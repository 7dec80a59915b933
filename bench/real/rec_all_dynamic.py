#!/usr/bin/env python3
"""The PP-OCRv4 recogniser with every input dim but the channels symbolic
([p2o.0, 3, ?, p2o.1], as a held-out trained recogniser declares it: a graph
that only translates at some heights), imported with no flags and run at
48x160, 48x320 and 48x640 against ONNX Runtime on the same file.

    python bench/real/rec_all_dynamic.py --models ~/.cache/softneuro/real-models --cli build/softneuro
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/softneuro/real-models"))
    ap.add_argument("--cli", default="build/softneuro")
    a = ap.parse_args()
    import onnx
    import onnxruntime as ort
    work = tempfile.mkdtemp()
    m = onnx.load(os.path.join(a.models, "ch_PP-OCRv4_rec_infer.onnx"))
    dims = m.graph.input[0].type.tensor_type.shape.dim
    for k, name in ((0, "p2o.DynamicDimension.0"), (2, "?"), (3, "p2o.DynamicDimension.1")):
        dims[k].Clear()
        dims[k].dim_param = name
    path = os.path.join(work, "rec_all_dynamic.onnx")
    onnx.save(m, path)
    dnn = os.path.join(work, "rec.dnn")
    r = subprocess.run([a.cli, "import", path, "-o", dnn], capture_output=True, text=True)
    print(r.stdout.strip().splitlines()[0] if r.returncode == 0 else r.stderr)
    if r.returncode:
        sys.exit(1)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    bad = 0
    for w in (160, 320, 640):
        x = rng.uniform(-1, 1, (1, 3, 48, w)).astype(np.float32)
        xp, yp = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
        np.save(xp, x)
        want = sess.run(None, {"x": x})[0]
        r = subprocess.run([a.cli, "run", dnn, "--input", f"x={xp}", "--output", f"{sess.get_outputs()[0].name}={yp}",
                            "--repeat", "1", "--top", "0"], capture_output=True, text=True)
        if r.returncode:
            print(f"48x{w}: FAILED {r.stderr.strip()[-300:]}")
            bad += 1
            continue
        got = np.load(yp)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        bad += err > 1e-4
        print(f"48x{w}: output {list(got.shape)}, max |ours - ORT| / max |ORT| = {err:.2e}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
