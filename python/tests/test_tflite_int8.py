"""Full-integer TensorFlow Lite files against the interpreter's own outputs,
bit for bit: tiny files made by TFLiteConverter and run by ai-edge-litert
(data/make_tflite_int8.py), with PRELU, ADD of two scales, RESIZE_BILINEAR,
int8 and uint8 graph inputs and a QUANTIZE between grids. Before, each of these
was rounded from float, one or more steps off the interpreter."""
import os

import numpy as np
import pytest

import softneuro

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


@pytest.mark.parametrize("io", ["int8", "uint8", "requant"])
@pytest.mark.parametrize("threads", [1, 2])
def test_full_integer_tflite_is_bit_for_bit_the_interpreter(io, threads):
    model = softneuro.import_tflite(os.path.join(DATA, f"tiny_int8_{io}.tflite"))
    golden = np.load(os.path.join(DATA, f"tiny_int8_{io}.litert.npz"))
    session = softneuro.Session(model, threads=threads)
    name_in, name_out = str(golden["input_name"]), str(golden["output_name"])
    seeds = sorted(k[1:] for k in golden.files if k.startswith("x"))
    assert len(seeds) == 4
    for seed in seeds:
        x, want = golden[f"x{seed}"], golden[f"y{seed}"]
        got = session.run({name_in: x})[name_out]
        assert got.dtype == want.dtype, f"seed {seed}"
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        assert diff.max() == 0, f"seed {seed}: {np.count_nonzero(diff)} of {diff.size} values differ, by up to {diff.max()}"
