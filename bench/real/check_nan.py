#!/usr/bin/env python3
"""NaN through a model, against ONNX Runtime: a finite input, one NaN pixel and an
all-NaN input, run by ONNX Runtime and by `softneuro run` on each .dnn file given.
Prints how many output values are NaN in each.

    bench/.venv/bin/python bench/real/check_nan.py --onnx M.onnx --shape 1x3x224x224 \
        --cli build/softneuro A.dnn [B.dnn ...]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--shape", required=True, help="the input's shape, e.g. 1x3x224x224")
    ap.add_argument("--cli", default="build/softneuro")
    ap.add_argument("dnn", nargs="+")
    a = ap.parse_args()
    shape = tuple(int(d) for d in a.shape.split("x"))
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    one = x.copy()
    one[(0, 1) + tuple(d // 2 for d in shape[2:])] = np.nan
    sess = ort.InferenceSession(a.onnx, providers=["CPUExecutionProvider"])
    iname, oname = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    tmp = tempfile.mkdtemp()
    bad = 0
    for tag, arr in [("finite", x), ("one NaN pixel", one), ("all NaN", np.full_like(x, np.nan))]:
        ref = sess.run(None, {iname: arr})[0]
        np.save(f"{tmp}/in.npy", arr)
        for f in a.dnn:
            out = f"{tmp}/out.npy"
            r = subprocess.run([a.cli, "run", f, "--input", f"{iname}={tmp}/in.npy", "--output", f"{oname}={out}",
                                "--repeat", "1"], capture_output=True, text=True)
            if r.returncode:
                print(r.stderr[-800:])
                return 1
            got = np.load(out)
            same = np.array_equal(np.isnan(got), np.isnan(ref))
            bad += not same
            print(f"{tag:14s} {os.path.basename(f):14s} NaN: ONNX Runtime {int(np.isnan(ref).sum())}/{ref.size}, "
                  f"ours {int(np.isnan(got).sum())}/{got.size} {'ok' if same else 'DIFFERENT'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
