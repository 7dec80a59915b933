"""The calibration inputs every int8 contender is calibrated on: the batches
softneuro's own calibration uses by default (CalibrationOptions with no inputs:
8 batches, batch b filled with std::normal_distribution<float>(0, 1) drawn from
std::mt19937(0x5eed + b), see src/profiler/calibrate.cpp).

They are made exactly by the CLI: an identity net (x + 0) run with
`softneuro run --seed 0x5eed+b`, whose random input comes from the same
generator and distribution, writes them back. When the CLI cannot do that, a
NumPy replica of libstdc++'s polar method gives the same values except for
about 0.3% of them, which differ in the last bit (logf rounding)."""
import os
import subprocess
import tempfile

import numpy as np

SEED_BASE = 0x5EED
BATCHES = 8


def std_normal_f32(seed, n):
    """std::normal_distribution<float>(0,1) over std::mt19937(seed), as libstdc++
    computes it (Marsaglia's polar method; each accepted pair yields y*m, then x*m)."""
    from numpy.random import MT19937
    bg = MT19937(0)
    bg._legacy_seeding(seed)  # init_genrand(seed): the same stream as std::mt19937(seed)
    f32 = np.float32
    pairs = (n + 1) // 2
    m = int(pairs * 1.35) + 64  # acceptance is pi/4; one chunk is plenty
    u = bg.random_raw(2 * m)
    c = u.astype(np.float32) / f32(2.0 ** 32)  # generate_canonical<float>
    c[c >= 1] = np.nextafter(f32(1), f32(0))
    v = ((f32(2) * c).astype(np.float64) - 1.0).astype(np.float32)
    x, y = v[0::2], v[1::2]
    r2 = x * x + y * y
    ok = (r2 <= 1) & (r2 != 0)
    x, y, r2 = x[ok], y[ok], r2[ok]
    if len(x) < pairs:
        raise RuntimeError("calibration replica: chunk too small")
    mult = np.sqrt((f32(-2) * np.log(r2.astype(np.float64)).astype(np.float32)) / r2)
    out = np.empty(2 * len(x), np.float32)
    out[0::2] = y * mult
    out[1::2] = x * mult
    return out[:n]


def _identity_onnx(path, shape):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, list(shape))
    z = numpy_helper.from_array(np.zeros([1], np.float32), "zero")
    g = helper.make_graph([helper.make_node("Add", ["input", "zero"], ["output"])], "identity", [x], [y], [z])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7  # readable by Debian's libonnx 1.12
    onnx.save(m, path)


def make_calibration(out_dir, shape, cli):
    """Writes out_dir/calib_{b}.npy (b < 8) of the given input shape; returns how
    they were made ("softneuro CLI" or "NumPy replica (...)")."""
    os.makedirs(out_dir, exist_ok=True)
    stamp = os.path.join(out_dir, "how.txt")
    files = [os.path.join(out_dir, f"calib_{b}.npy") for b in range(BATCHES)]
    if os.path.exists(stamp) and all(os.path.exists(f) for f in files):
        if all(np.load(f, mmap_mode="r").shape == tuple(shape) for f in files):
            return open(stamp).read().strip()
    how = "softneuro CLI (exact)"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            onnx_path, dnn = os.path.join(tmp, "id.onnx"), os.path.join(tmp, "id.dnn")
            _identity_onnx(onnx_path, shape)
            subprocess.run([cli, "import", onnx_path, "-o", dnn, "--no-passes"], check=True, capture_output=True)
            for b, f in enumerate(files):
                subprocess.run([cli, "run", dnn, "--seed", str(SEED_BASE + b), "--output", "output=" + f,
                                "--repeat", "1", "--top", "0", "--threads", "1"], check=True, capture_output=True)
                a = np.load(f)
                if a.shape != tuple(shape) or a.dtype != np.float32:
                    raise RuntimeError(f"identity net gave {a.shape} {a.dtype}")
    except Exception as e:
        how = f"NumPy replica ({type(e).__name__} from the CLI route)"
        n = int(np.prod(shape))
        for b, f in enumerate(files):
            np.save(f, std_normal_f32(SEED_BASE + b, n).reshape(shape))
    open(stamp, "w").write(how + "\n")
    return how
