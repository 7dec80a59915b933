#!/usr/bin/env python3
"""Resident memory of sessions of one model: one session over several input
shapes, and several sessions at one shape (issue 50: derived weights, packed
or transformed for a routine, are the model's, shared by every session and shape).

    bench/.venv/bin/pip install .     # the softneuro package
    bench/.venv/bin/python bench/session_memory.py MODEL.dnn [--shapes 1x3x224x224,1x3x192x256,...] [--sessions 4]

Prints VmRSS after loading, after one session ran the first shape, after it ran
every shape, and after --sessions sessions ran the first shape, with the ratios
the issue bounds (1.15x).
"""
import argparse

import numpy as np

import softneuro


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--shapes", default="1x3x224x224,1x3x192x256,1x3x256x192,1x3x288x288")
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    shapes = [tuple(int(d) for d in s.split("x")) for s in a.shapes.split(",")]
    m = softneuro.load(a.model)
    name = m.inputs[0].name
    rng = np.random.default_rng(0)
    x = {s: {name: rng.standard_normal(s).astype(np.float32)} for s in shapes}
    loaded = rss_mib()
    s0 = softneuro.Session(m, threads=a.threads, shape_cache=len(shapes))
    s0.run(x[shapes[0]])
    one_shape = rss_mib()
    for s in shapes[1:]:
        s0.run(x[s])
    all_shapes = rss_mib()
    del s0
    sessions = [softneuro.Session(m, threads=a.threads) for _ in range(a.sessions)]
    first = None
    for k, s in enumerate(sessions):
        s.run(x[shapes[0]])
        if k == 0:
            first = rss_mib()
    many = rss_mib()
    print(f"{a.model}: resident MiB after load {loaded:.1f}")
    print(f"  one session, {shapes[0]}: {one_shape:.1f}; after {len(shapes)} shapes: {all_shapes:.1f} "
          f"({all_shapes / one_shape:.2f}x)")
    print(f"  one session: {first:.1f}; {a.sessions} sessions: {many:.1f} ({many / first:.2f}x)")


if __name__ == "__main__":
    main()
