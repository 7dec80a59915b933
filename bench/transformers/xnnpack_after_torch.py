#!/usr/bin/env python3
"""Check of a fixed bug (sessions 114-115): a process that loads Debian's PyTorch
(which links libXNNPACK and libpthreadpool) before softneuro, then runs a .dnn
with cpu/xnnpack steps on 2 threads, crashed (SIGSEGV), hung, or by luck ran:
libXNNPACK's pthreadpool_parallelize_* were bound to the real libpthreadpool and
got our pool handles. cpu/xnnpack now checks where XNNPACK's calls land and, where
elsewhere, warns and gives XNNPACK no pool (its layers run on one thread).

    PYTHONPATH=<this build's package> bench/.venv/bin/python bench/transformers/xnnpack_after_torch.py FILE.dnn NAME=1x3x48x320 [--runs 20]

FILE.dnn: a file whose path has XNNPACK steps (the PP-OCRv4 recogniser tuned
float32 has 22 on an AVX-512 Xeon). Exits 0 when every run completes.
"""
import argparse
import sys

import numpy as np
import onnxruntime  # noqa: F401  (the import order of bench/transformers/gpt2_kv.py)
import torch  # noqa: F401
import transformers  # noqa: F401

import softneuro


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dnn")
    ap.add_argument("input", help="NAME=1x3x48x320")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    name, shape = args.input.split("=")
    x = np.random.default_rng(0).standard_normal([int(d) for d in shape.split("x")]).astype(np.float32)
    s = softneuro.Session(softneuro.load(args.dnn), threads=2)
    steps = sum("xnnpack" in l["descriptor"] for l in s.layers())
    print(f"{steps} XNNPACK steps", flush=True)
    for _ in range(args.runs):
        s.run({name: x})
    print(f"{args.runs} runs completed")


if __name__ == "__main__":
    sys.exit(main())
