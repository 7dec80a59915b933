#!/usr/bin/env python3
"""Resident memory of one session of a model after its first input shape and
after four (issue 50: at most 1.15x), for a model whose input takes any
height, width and batch (e.g. ResNet50 exported with dims N, H, W symbolic).
Sessions at one thread; each shape run twice. Memory of N sessions:
`softneuro bench FILE --sessions N --threads 1 --runs 3` prints it.

    build/python-venv/bin/python bench/session_memory.py MODEL.dnn [--input NAME]
"""
import argparse

import numpy as np

import softneuro

SHAPES = [(1, 3, 224, 224), (1, 3, 256, 256), (1, 3, 192, 320), (2, 3, 224, 224)]


def resident_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--input", default="input")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    session = softneuro.Session(softneuro.load(a.model), threads=1)
    session.run({a.input: rng.standard_normal(SHAPES[0]).astype(np.float32)})
    one = resident_mib()
    for shape in SHAPES[1:]:
        for _ in range(2):
            session.run({a.input: rng.standard_normal(shape).astype(np.float32)})
    four = resident_mib()
    print(f"{a.model}: one session {one:.0f} MiB after 1 shape, {four:.0f} MiB after 4 shapes: {four / one:.2f}x")


if __name__ == "__main__":
    main()
