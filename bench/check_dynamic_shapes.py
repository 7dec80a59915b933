#!/usr/bin/env python3
"""Runs real models with symbolic input dims at several shapes in one session
and checks every output against ONNX Runtime at that shape.

    bench/.venv/bin/python bench/check_dynamic_shapes.py [--cli build/softneuro] [--models DIR]

Models come from ../shared/real-models/fetch.sh (default folder
~/.cache/softneuro/real-models). For each model it runs
    softneuro import MODEL.onnx -o MODEL.dnn [--input-shape x=?x3x48x?]
    softneuro run MODEL.dnn --input x=a.npy,b.npy,c.npy --output y=y.npy --repeat 1
(one process, one net: the shapes follow one another in one session) and ONNX
Runtime on the same inputs; passes where max |diff| <= 1e-4 * max |ORT| + 1e-5
at every shape. Exit status 1 when any model fails.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# file, --input-shape for import (None: the model's own), shapes to run
MODELS = [
    ("ch_PP-OCRv4_rec_infer.onnx", "x=?x3x48x?", [(1, 3, 48, 160), (1, 3, 48, 320), (1, 3, 48, 640)]),
    ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "x=?x3x48x?", [(1, 3, 48, 192), (2, 3, 48, 192), (1, 3, 48, 320)]),
    ("ch_PP-OCRv4_det_infer.onnx", None, [(1, 3, 320, 320), (1, 3, 480, 640), (1, 3, 640, 480)]),
    # YOLOv8n: H and W fixed (its anchor constants depend on them), the batch dynamic; SiLU fused into its convs
    ("320n.onnx", "images=?x3x320x320", [(1, 3, 320, 320), (2, 3, 320, 320)]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/softneuro/real-models"))
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for file, input_shape, shapes in MODELS:
            path = os.path.join(args.models, file)
            if not os.path.exists(path):
                print(f"{file}: missing (run ../shared/real-models/fetch.sh)")
                failed += 1
                continue
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            name = sess.get_inputs()[0].name
            out_name = sess.get_outputs()[0].name
            dnn = os.path.join(tmp, file + ".dnn")
            cmd = [args.cli, "import", path, "-o", dnn] + (["--input-shape", input_shape] if input_shape else [])
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            rng = np.random.default_rng(0)
            npys, refs = [], []
            for k, shape in enumerate(shapes):
                x = rng.uniform(-1, 1, size=shape).astype(np.float32)
                npy = os.path.join(tmp, f"x{k}.npy")
                np.save(npy, x)
                npys.append(npy)
                refs.append(sess.run([out_name], {name: x})[0])
            out = os.path.join(tmp, "y.npy")
            run = subprocess.run([args.cli, "run", dnn, "--input", f"{name}={','.join(npys)}", "--output",
                                  f"{out_name}={out}", "--repeat", "1", "--top", "0"], capture_output=True, text=True)
            if run.returncode:
                print(f"{file}: run failed: {run.stderr.strip()}")
                failed += 1
                continue
            for k, (shape, ref) in enumerate(zip(shapes, refs)):
                got = np.load(os.path.join(tmp, f"y.{k}.npy"))
                if got.shape != ref.shape:
                    print(f"{file} {shape}: output shape {got.shape}, ONNX Runtime {ref.shape}  FAIL")
                    failed += 1
                    continue
                diff = float(np.max(np.abs(got - ref)))
                tol = 1e-4 * float(np.max(np.abs(ref))) + 1e-5
                ok = diff <= tol
                failed += not ok
                print(f"{file} {'x'.join(map(str, shape))}: output {'x'.join(map(str, ref.shape))}, "
                      f"max |diff| {diff:.2e} (tolerance {tol:.2e})  {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
