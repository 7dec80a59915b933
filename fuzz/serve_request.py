#!/usr/bin/env python3
"""A libFuzzer harness (atheris) for the Python-facing .npz reader: the request
reader of examples/serve (`read_request`), which every HTTP request body goes
through before a session sees it.

Each input is a request body. It must end in the inputs (each an array whose
shape, dtype and bytes match its .npy header, within the byte limit) or in a
BadRequest; any other exception, a hang or an allocation past libFuzzer's
limit is a finding.

    pip install atheris numpy 'ray[serve]'      # a venv of its own
    python fuzz/serve_request.py CORPUS_DIR -max_total_time=600 -rss_limit_mb=2048

scripts/fuzz_campaign.sh runs it (harness name serve_request) where the venv
build/python-venv has atheris; seeds are written by --seeds DIR.
"""
import io
import os
import sys
import zipfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "serve"))

# The byte limit of the fuzzed reader: small, so that a header claiming a
# large array is refused without reading (the real limit is 256 MiB).
MAX_BYTES = 1 << 20
INPUTS = ["x", "ids", "mask"]


def check(body: bytes) -> None:
    import softneuro_serve
    try:
        got = softneuro_serve.read_request(body, INPUTS, max_bytes=MAX_BYTES)
    except softneuro_serve.BadRequest:
        return
    total = 0
    for name, a in got.items():
        if name not in INPUTS:
            raise AssertionError(f"read_request returned '{name}', not an input")
        if a.dtype.kind not in "biuf" or a.dtype.fields is not None:
            raise AssertionError(f"read_request returned '{name}' of dtype {a.dtype}")
        total += a.nbytes
    if total > MAX_BYTES:
        raise AssertionError(f"read_request returned {total} bytes, over its limit {MAX_BYTES}")


def write_seeds(folder: str) -> None:
    """Request bodies as clients send them (np.savez, np.savez_compressed) and damaged ones."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    bodies = []
    for dtype in ["float32", "float64", "int64", "int32", "int8", "uint8", "bool", "float16"]:
        for save in (np.savez, np.savez_compressed):
            buf = io.BytesIO()
            save(buf, x=(rng.standard_normal((2, 3)) * 10).astype(dtype), ids=np.arange(4, dtype=np.int64))
            bodies.append(buf.getvalue())
    buf = io.BytesIO()
    np.savez(buf, x=np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)), mask=np.ones((1, 7), bool))
    bodies.append(buf.getvalue())
    buf = io.BytesIO()
    np.savez(buf, x=np.array(["a"]))
    bodies.append(buf.getvalue())
    header = io.BytesIO()
    np.lib.format.write_array_header_2_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 30,)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("x.npy", header.getvalue())
    bodies.append(buf.getvalue())
    for i, b in enumerate(bodies):
        with open(os.path.join(folder, f"seed{i:02d}.npz"), "wb") as f:
            f.write(b)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--seeds":
        write_seeds(sys.argv[2])
        return
    import atheris
    import softneuro_serve  # noqa: F401  (ray imported before instrumenting: not ours to cover)
    # Coverage of the reader and of what it parses with (zipfile, numpy's .npy
    # header parser), function by function: instrument_all() would also take
    # ray's 20,000 functions (minutes at start-up), which the reader never calls.
    import inspect
    functions = [softneuro_serve.read_request]
    for module in (zipfile, np.lib.format):
        for value in vars(module).values():
            if inspect.isclass(value) and value.__module__ == module.__name__:
                functions += [f for f in vars(value).values() if inspect.isfunction(f)]
            elif inspect.isfunction(value) and value.__module__ == module.__name__:
                functions.append(value)
    for f in functions:
        atheris.instrument_func(f)
    # libFuzzer's -merge=1 starts argv[0] again: the executable wrapper that
    # scripts/fuzz.sh writes (build-fuzz/fuzz/fuzz_serve_request) says where it is.
    argv = list(sys.argv)
    if os.environ.get("SOFTNEURO_FUZZ_SELF"):
        argv[0] = os.environ["SOFTNEURO_FUZZ_SELF"]
    atheris.Setup(argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
