"""Makes full-integer .tflite models from trained float ones with TensorFlow
Lite's own post-training quantiser, for checking our int8 path bit for bit
against the interpreter (bench/tflite/check_tflite.py).

    bench/compare/.venv-tflite/bin/python bench/tflite/make_int8.py --out DIR \
        [--io int8|uint8|float ...] MODEL.tflite [MODEL.tflite ...]

A float .tflite cannot be handed to TFLiteConverter directly, so each model
goes the way a user without the training code has: tf2onnx (--tflite) to ONNX,
onnx2tf to a SavedModel, then TFLiteConverter with a representative dataset
(8 seeded uniform [0, 1) inputs), every operator int8 (TFLITE_BUILTINS_INT8).
`--io` lists the graph input/output types to make, one file each
(NAME_int8.tflite: int8 in and out; NAME_uint8.tflite: uint8 in and out, which
puts QUANTIZE uint8 -> int8 and int8 -> uint8 steps at the edges;
NAME_float.tflite: float in and out).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(cmd, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])}...: {(r.stderr or r.stdout)[-1500:]}")


def saved_model(tflite, work):
    bin_dir = os.path.dirname(sys.executable)
    onnx_path = os.path.join(work, "model.onnx")
    run([sys.executable, "-m", "tf2onnx.convert", "--tflite", tflite, "--output", onnx_path, "--opset", "13"])
    sm = os.path.join(work, "saved_model")
    import onnx
    # The file's NHWC inputs as they are (onnx2tf would read them as NCHW).
    # onnx2tf checks its conversion of image inputs on sample images, which it
    # downloads unless its working directory holds them: seeded uniform [0, 1) ones.
    rng = np.random.default_rng(0)
    np.save(os.path.join(work, "calibration_image_sample_data_20x128x128x3_float32.npy"),
            rng.uniform(0, 1, size=(20, 128, 128, 3)).astype(np.float32))
    cmd = [os.path.join(bin_dir, "onnx2tf"), "-i", onnx_path, "-o", sm, "-osd", "-n"]
    for i in onnx.load(onnx_path).graph.input:
        cmd += ["-kat", i.name]
    run(cmd, cwd=work)
    return sm


def quantise(sm, io, seed=0):
    import tensorflow as tf
    loaded = tf.saved_model.load(sm)
    fn = loaded.signatures["serving_default"]
    specs = fn.structured_input_signature[1]

    def representative():
        rng = np.random.default_rng(seed)
        for _ in range(8):
            yield {k: rng.uniform(0, 1, size=[int(d) for d in s.shape]).astype(np.float32) for k, s in specs.items()}

    conv = tf.lite.TFLiteConverter.from_saved_model(sm)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if io != "float":
        conv.inference_input_type = tf.int8 if io == "int8" else tf.uint8
        conv.inference_output_type = conv.inference_input_type
    return conv.convert()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--io", nargs="+", default=["int8"], choices=["int8", "uint8", "float"])
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    failed = 0
    for path in a.models:
        name = os.path.splitext(os.path.basename(path))[0]
        with tempfile.TemporaryDirectory() as work:
            try:
                sm = saved_model(path, work)
                for io in a.io:
                    dst = os.path.join(a.out, f"{name}_{io}.tflite")
                    with open(dst, "wb") as f:
                        f.write(quantise(sm, io))
                    print(f"{dst}: {os.path.getsize(dst)} bytes")
            except Exception as e:  # one model's failure does not stop the rest
                print(f"{name}: {e}")
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
