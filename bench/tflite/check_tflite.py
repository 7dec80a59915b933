"""Imports .tflite models with `softneuro import` and compares every output
with TensorFlow Lite's interpreter (ai-edge-litert) on the same seeded inputs.

    bench/compare/.venv-tflite/bin/python bench/tflite/check_tflite.py [--cli build/softneuro] \
        MODEL.tflite [MODEL.tflite ...]

A float output passes within 1e-4 of the reference's largest magnitude
(+1e-5), or within the interpreter's own spread: how far its reference kernels
(OpResolverType.BUILTIN_REF) lie from its default XNNPACK path on the same
input, where that is wider (a deep decoder's large logits). For a quantised model (--quantized, or any int8/uint8 tensor inside)
the figure that matters is how far the interpreter's own int8 rounding lies from
ours: the script prints the largest difference in quantisation steps of the
output and the cosine, and passes within --steps steps (default 1e-4 of the
magnitude, as for float, unless given). Exit status 1 when any model fails.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def interpreter(path, threads, reference_kernels=False):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    kind = OpResolverType.BUILTIN_REF if reference_kernels else OpResolverType.AUTO
    it = Interpreter(model_path=path, num_threads=threads, experimental_op_resolver_type=kind)
    it.allocate_tensors()
    return it


def make_inputs(it, rng):
    xs = {}
    for d in it.get_input_details():
        shape, dtype = tuple(d["shape"]), d["dtype"]
        if dtype == np.float32:
            xs[d["name"]] = rng.uniform(0, 1, size=shape).astype(np.float32)
        elif dtype in (np.int8, np.uint8):
            info = np.iinfo(dtype)
            xs[d["name"]] = rng.integers(info.min, info.max + 1, size=shape).astype(dtype)
        else:
            raise RuntimeError(f"input {d['name']} of type {dtype}")
    return xs


def reference(it, xs):
    for d in it.get_input_details():
        it.set_tensor(d["index"], xs[d["name"]])
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}


def quantized_inside(it):
    return any(d["dtype"] in (np.int8, np.uint8) and d["quantization"][0] != 0 for d in it.get_tensor_details())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=2, help="input sets per model")
    ap.add_argument("--steps", type=float, default=None,
                    help="quantised models: largest difference allowed, in steps of the output's quantisation")
    a = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in a.models:
            name = os.path.basename(path)
            dnn = os.path.join(tmp, name + ".dnn")
            r = subprocess.run([a.cli, "import", path, "-o", dnn], capture_output=True, text=True)
            if r.returncode:
                print(f"{name}: import failed: {r.stderr.strip()[:2000]}")
                failed += 1
                continue
            it = interpreter(path, a.threads)
            try:
                it_ref = interpreter(path, a.threads, reference_kernels=True)
            except RuntimeError as e:  # a custom op only XNNPACK's delegate knows (MediaPipe's)
                print(f"{name}: no spread measured: the reference kernels refuse it ({str(e).splitlines()[0][:120]})")
                it_ref = None
            quant = quantized_inside(it)
            out_details = it.get_output_details()
            for seed in range(a.seeds):
                rng = np.random.default_rng(seed)
                xs = make_inputs(it, rng)
                refs = reference(it, xs)
                spreads = reference(it_ref, xs) if it_ref else refs
                cmd = [a.cli, "run", dnn, "--repeat", "1", "--top", "0", "--threads", str(a.threads)]
                for k, (iname, x) in enumerate(xs.items()):
                    f = os.path.join(tmp, f"x{k}.npy")
                    np.save(f, x)
                    cmd += ["--input", f"{iname}={f}"]
                outs = {}
                for k, d in enumerate(out_details):
                    outs[d["name"]] = os.path.join(tmp, f"y{k}.npy")
                    cmd += ["--output", f"{d['name']}={outs[d['name']]}"]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode:
                    print(f"{name}: run failed: {r.stderr.strip()[:2000]}")
                    failed += 1
                    break
                for d in out_details:
                    ref = refs[d["name"]]
                    got = np.load(outs[d["name"]])
                    if got.shape != ref.shape:
                        print(f"{name} seed {seed} {d['name']}: shape {got.shape}, interpreter {ref.shape}  FAIL")
                        failed += 1
                        continue
                    rf, gf = ref.astype(np.float64), got.astype(np.float64)
                    scale, zp = d["quantization"]
                    if d["dtype"] in (np.int8, np.uint8) and scale:
                        rf, gf = (rf - zp) * scale, (gf - zp) * scale
                    diff = float(np.max(np.abs(gf - rf))) if rf.size else 0.0
                    mag = float(np.max(np.abs(rf))) if rf.size else 0.0
                    sf = spreads[d["name"]].astype(np.float64)
                    if d["dtype"] in (np.int8, np.uint8) and scale:
                        sf = (sf - zp) * scale
                    spread = float(np.max(np.abs(sf - rf))) if rf.size else 0.0
                    tol = max(1e-4 * mag + 1e-5, spread)
                    line = (f"{name} seed {seed} {d['name']} {list(ref.shape)}: max |diff| {diff:.2e} "
                            f"(magnitude {mag:.3g}, interpreter's own spread {spread:.2e})")
                    if quant:
                        cos = float(np.dot(rf.ravel(), gf.ravel()) / (np.linalg.norm(rf) * np.linalg.norm(gf) + 1e-30))
                        line += f", cosine {cos:.6f}"
                        if scale:
                            line += f", {diff / scale:.1f} steps"
                            if a.steps is not None:
                                tol = a.steps * scale + 1e-6
                    ok = diff <= tol
                    failed += not ok
                    print(f"{line}  {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
