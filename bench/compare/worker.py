#!/usr/bin/env python3
"""One contender of bench/compare/compare.py, in its own process.

Every peer runs in a process of its own so that one library's crash, thread
pool or stdout chatter cannot touch another, and so that TensorFlow Lite can
live in its own virtual environment (it needs NumPy 2, Debian's PyTorch needs
NumPy 1). compare.py drives the processes round-robin; nothing here is meant
to be run by hand, but it can be:

    worker.py prepare-torch  --model resnet50 --zoo Z --work W [--threads T]
    worker.py prepare-ort-int8 --model resnet50 --zoo Z --work W --calib DIR
    worker.py prepare-tflite --model resnet50 --zoo Z --work W --calib DIR
    worker.py serve KIND --model resnet50 --zoo Z --work W --threads T

`serve` loads the model, runs the reference input once (its output goes to
W/KIND.output.npy), warms up, prints one JSON line {"ready": ...}, then answers
JSON commands read from stdin, one per line:
    {"cmd": "bench", "runs": K, "warmup": 1}  ->  {"times_ms": [...]}  (wall clock, in process)
    {"cmd": "quit"}
Libraries' own prints go to stderr: the JSON protocol owns stdout.
KIND: ort_fp32 ort_int8 torch_eager torch_jit torch_int8 tflite_fp32 tflite_int8.
Every prepare-* command prints one JSON line as its last stdout line.
"""
import argparse
import glob
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# torchvision models with a quantisable twin in torchvision.models.quantization
TORCH_QUANTISABLE = {"resnet18", "resnet50", "resnext101_32x8d", "resnext101_64x4d", "mobilenet_v2",
                     "mobilenet_v3_large", "googlenet", "inception_v3", "shufflenet_v2_x0_5",
                     "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0"}
TORCH_ENGINES = ("x86", "fbgemm", "onednn", "qnnpack")  # preference order


def _protocol_stdout():
    """Keeps the real stdout for the JSON protocol and sends fd 1 (C and Python
    prints of the libraries) to stderr."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    return os.fdopen(fd, "w", buffering=1)


def calib_batches(calib_dir):
    import numpy as np
    files = sorted(glob.glob(os.path.join(calib_dir, "calib_*.npy")))
    if not files:
        raise RuntimeError(f"no calibration batches in {calib_dir}")
    return [np.load(f) for f in files]


# ---------------------------------------------------------------- PyTorch

def _export_zoo_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("export_zoo", os.path.join(ROOT, "bench", "models", "export_zoo.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def torch_float_model(name, work):
    import torch
    ez = _export_zoo_module()
    m = ez.build(name).eval()
    m.load_state_dict(torch.load(os.path.join(work, "torch_float.pt")))
    return m.eval()


def pick_engine():
    import torch
    engines = torch.backends.quantized.supported_engines
    for e in TORCH_ENGINES:
        if e in engines:
            return e
    raise RuntimeError(f"no quantised engine in this PyTorch (supported: {engines})")


def prepare_torch(a):
    """Rebuilds the zoo's float model exactly as export_zoo.py made it (same seed,
    same BatchNorm re-estimation), checks it against NAME.output.npy, saves its
    weights; then, when torchvision has a quantisable twin, quantises it
    (post-training static, the engine's default qconfig, calibrated on the same
    batches as everyone else) and saves it as frozen TorchScript."""
    import numpy as np
    import torch
    import torchvision
    torch.set_num_threads(a.threads)
    ez = _export_zoo_module()
    res = {}
    t0 = time.time()
    torch.manual_seed(a.seed)
    model = ez.build(a.model).eval()
    ez.randomize_zero_layers(model)
    ez.calibrate_batchnorm(model, a.bn_passes, a.bn_batch, a.seed)
    x = torch.from_numpy(np.load(os.path.join(a.zoo, a.model + ".input.npy")))
    ref = np.load(os.path.join(a.zoo, a.model + ".output.npy"))
    with torch.no_grad():
        y = model(x).numpy()
    diff = float(np.abs(y - ref).max())
    scale = float(np.abs(ref).max())
    res["float_rebuild_max_abs_diff"] = diff
    if not diff <= 1e-3 * scale + 1e-5:
        raise RuntimeError(f"rebuilt {a.model} differs from the zoo's output by {diff:.3g} (max |y| {scale:.3g}): "
                           "was the zoo exported with other --seed/--bn-passes/--bn-batch?")
    torch.save(model.state_dict(), os.path.join(a.work, "torch_float.pt"))
    res["float_s"] = time.time() - t0
    if a.model not in TORCH_QUANTISABLE:
        res["int8_skipped"] = f"torchvision {torchvision.__version__} has no quantisable {a.model}"
        return res
    try:
        t0 = time.time()
        engine = pick_engine()
        torch.backends.quantized.engine = engine
        qm = getattr(torchvision.models.quantization, a.model)(weights=None, quantize=False)
        qm.load_state_dict(model.state_dict())
        qm.eval()
        qm.fuse_model(is_qat=False)
        qm.qconfig = torch.ao.quantization.get_default_qconfig(engine)
        torch.ao.quantization.prepare(qm, inplace=True)
        with torch.no_grad():
            for b in calib_batches(a.calib):
                qm(torch.from_numpy(b))
        torch.ao.quantization.convert(qm, inplace=True)
        with torch.no_grad():
            traced = torch.jit.freeze(torch.jit.trace(qm, x).eval())
        torch.jit.save(traced, os.path.join(a.work, "torch_int8.pt"))
        json.dump({"engine": engine, "qconfig": str(qm.qconfig) if hasattr(qm, "qconfig") else ""},
                  open(os.path.join(a.work, "torch_int8.json"), "w"))
        res.update(int8_engine=engine, int8_s=time.time() - t0)
    except Exception as e:  # the float contenders still run
        res["int8_error"] = f"{type(e).__name__}: {e}"
    return res


# ---------------------------------------------------------------- ONNX Runtime

class _Reader:
    def __init__(self, name, batches):
        self.it = iter([{name: b} for b in batches])

    def get_next(self):
        return next(self.it, None)


def prepare_ort_int8(a):
    """Static QDQ quantisation (onnxruntime.quantization.quantize_static):
    per-channel int8 weights, uint8 activations (ONNX Runtime's fast U8S8 path on
    x86), min/max calibration on the shared calibration batches."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    src = os.path.join(a.zoo, a.model + ".onnx")
    pre = os.path.join(a.work, "ort_pre.onnx")
    out = os.path.join(a.work, "ort_int8.onnx")
    res = {}
    t0 = time.time()
    try:
        from onnxruntime.quantization.shape_inference import quant_pre_process
        quant_pre_process(src, pre)
        res["pre_process"] = True
    except Exception as e:
        pre = src
        res["pre_process"] = f"skipped ({type(e).__name__}: {e})"
    name = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).get_inputs()[0].name
    quantize_static(pre, out, _Reader(name, calib_batches(a.calib)), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax)
    res["quantize_s"] = time.time() - t0
    return res


# ---------------------------------------------------------------- TensorFlow Lite

def zero_pad_max_pools(path):
    """A MaxPool with pads that reads a Relu: padded with zeros by a Pad before
    it instead (the same values: its inputs are >= 0). onnx2tf pads a max pool
    with -FLT_MAX, and TFLiteConverter puts that value into the int8 scale of
    the Relu's output (1.3e36 in ResNet50: a file the interpreter refuses)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(path)
    g = m.graph
    producers = {o: n for n in g.node for o in n.output}
    nodes, changed = [], False
    for n in g.node:
        pads = next((list(x.ints) for x in n.attribute if x.name == "pads"), None)
        src = producers.get(n.input[0])
        if n.op_type == "MaxPool" and pads and any(pads) and src is not None and src.op_type == "Relu":
            k = len(pads) // 2
            name = n.name + "_zero_pads"
            g.initializer.append(numpy_helper.from_array(np.array([0, 0] + pads[:k] + [0, 0] + pads[k:], np.int64), name))
            padded = n.input[0] + "_zero_padded"
            nodes.append(helper.make_node("Pad", [n.input[0], name], [padded], mode="constant", name=n.name + "_pad"))
            n.input[0] = padded
            for x in n.attribute:
                if x.name == "pads":
                    x.ints[:] = [0] * len(pads)
            changed = True
        nodes.append(n)
    if changed:
        del g.node[:]
        g.node.extend(nodes)
        onnx.save(m, path)


def prepare_tflite(a):
    """ONNX -> TensorFlow SavedModel + float32 .tflite with onnx2tf (NHWC input),
    then full-integer int8 with TFLiteConverter on the same calibration batches."""
    import subprocess
    import numpy as np
    src = os.path.join(a.zoo, a.model + ".onnx")
    out = os.path.join(a.work, "tflite")
    os.makedirs(out, exist_ok=True)
    # onnx2tf downloads sample images for its self-check unless this file is in
    # its working directory; nothing can be downloaded here, so give it seeded noise.
    sample = os.path.join(out, "calibration_image_sample_data_20x128x128x3_float32.npy")
    if not os.path.exists(sample):
        np.save(sample, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))
    t0 = time.time()
    # onnx2tf rewrites its input file in place (shape inference): give it a copy,
    # never the zoo's file.
    import shutil
    work_onnx = os.path.join(out, a.model + ".onnx")
    shutil.copyfile(src, work_onnx)
    zero_pad_max_pools(work_onnx)
    exe = os.path.join(os.path.dirname(sys.executable), "onnx2tf")
    r = subprocess.run([exe, "-i", work_onnx, "-o", os.path.join(out, "saved_model")], cwd=out,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    open(os.path.join(out, "onnx2tf.log"), "w").write(r.stdout)
    f32 = os.path.join(out, "saved_model", a.model + "_float32.tflite")
    if r.returncode != 0 or not os.path.exists(f32):
        tail = [l for l in r.stdout.splitlines() if l.strip()][-3:]
        raise RuntimeError("onnx2tf failed: " + " | ".join(tail))
    os.replace(f32, os.path.join(out, "fp32.tflite"))
    res = {"onnx2tf_s": time.time() - t0}

    import tensorflow as tf
    batches = [b.transpose(0, 2, 3, 1).copy() for b in calib_batches(a.calib)]  # onnx2tf makes the input NHWC

    def rep():
        for b in batches:
            yield [b]

    t0 = time.time()
    for ops, note in (([tf.lite.OpsSet.TFLITE_BUILTINS_INT8], "int8 only"),
                      ([tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.TFLITE_BUILTINS], "int8 with float fallback")):
        try:
            c = tf.lite.TFLiteConverter.from_saved_model(os.path.join(out, "saved_model"))
            c.optimizations = [tf.lite.Optimize.DEFAULT]
            c.representative_dataset = rep
            c.target_spec.supported_ops = ops
            open(os.path.join(out, "int8.tflite"), "wb").write(c.convert())
            res["int8_ops"] = note
            break
        except Exception as e:
            res.setdefault("int8_errors", []).append(f"{note}: {type(e).__name__}: {str(e)[:300]}")
    res["int8_s"] = time.time() - t0
    return res


# ---------------------------------------------------------------- serving

def load_contender(kind, a, x):
    """Returns (run, info): run() does one inference of the reference input x and
    returns the output as a NumPy array."""
    import numpy as np
    info = {}
    if kind.startswith("ort_"):
        import onnxruntime as ort
        path = os.path.join(a.zoo, a.model + ".onnx") if kind == "ort_fp32" else os.path.join(a.work, "ort_int8.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        iname, oname = sess.get_inputs()[0].name, sess.get_outputs()[0].name
        info["version"] = "onnxruntime " + ort.__version__
        feed = {iname: x}
        return (lambda: sess.run([oname], feed)[0]), info
    if kind.startswith("torch_"):
        import torch
        torch.set_num_threads(a.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        info["version"] = "torch " + torch.__version__
        xt = torch.from_numpy(x)
        torch.set_grad_enabled(False)
        if kind == "torch_int8":
            meta = json.load(open(os.path.join(a.work, "torch_int8.json")))
            torch.backends.quantized.engine = meta["engine"]
            info["engine"] = meta["engine"]
            m = torch.jit.load(os.path.join(a.work, "torch_int8.pt"))
        else:
            m = torch_float_model(a.model, a.work)
            if kind == "torch_jit":
                m = torch.jit.freeze(torch.jit.trace(m, xt).eval())
        if kind == "torch_eager":
            def run():
                with torch.inference_mode():
                    return m(xt).numpy()
            return run, info
        return (lambda: m(xt).numpy()), info
    if kind.startswith("tflite_"):
        try:
            from ai_edge_litert.interpreter import Interpreter, OpResolverType
            import ai_edge_litert
            info["version"] = "ai-edge-litert " + getattr(ai_edge_litert, "__version__", "?")
        except ImportError:
            import tensorflow as tf
            Interpreter, OpResolverType = tf.lite.Interpreter, tf.lite.experimental.OpResolverType
            info["version"] = "tensorflow " + tf.__version__
        path = os.path.join(a.work, "tflite", "fp32.tflite" if kind == "tflite_fp32" else "int8.tflite")
        try:
            it = Interpreter(model_path=path, num_threads=a.threads)
            it.allocate_tensors()
        except RuntimeError as e:  # XNNPACK (the default delegate) refuses some graphs: TFLite's own kernels then
            it = Interpreter(model_path=path, num_threads=a.threads,
                             experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
            it.allocate_tensors()
            info["note"] = ("without the XNNPACK delegate (TFLite's built-in kernels): XNNPACK refused the model: "
                            + " ".join(str(e).split())[:200])
        i, o = it.get_input_details()[0], it.get_output_details()[0]
        xi = x
        if list(i["shape"]) != list(x.shape) and list(i["shape"]) == [x.shape[0], x.shape[2], x.shape[3], x.shape[1]]:
            xi = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        if i["dtype"] != np.float32:
            scale, zp = i["quantization"]
            xi = np.clip(np.round(xi / scale + zp), np.iinfo(i["dtype"]).min, np.iinfo(i["dtype"]).max).astype(i["dtype"])

        def run():
            it.set_tensor(i["index"], xi)
            it.invoke()
            y = it.get_tensor(o["index"])
            if o["dtype"] != np.float32:
                scale, zp = o["quantization"]
                y = (y.astype(np.float32) - zp) * scale
            return y
        return run, info
    raise ValueError(f"unknown contender kind {kind}")


def serve(a):
    import numpy as np
    proto = _protocol_stdout()
    x = np.load(os.path.join(a.zoo, a.model + ".input.npy"))
    t0 = time.time()
    run, info = load_contender(a.kind, a, x)
    y = np.asarray(run(), dtype=np.float32)
    np.save(os.path.join(a.work, a.kind + ".output.npy"), y)
    for _ in range(a.warmup):
        run()
    info["load_s"] = time.time() - t0
    proto.write(json.dumps({"ready": True, "info": info}) + "\n")
    perf = time.perf_counter
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("cmd") == "quit":
            break
        if req.get("cmd") == "bench":
            for _ in range(int(req.get("warmup", 1))):
                run()
            times = []
            for _ in range(int(req["runs"])):
                t = perf()
                run()
                times.append((perf() - t) * 1e3)
            proto.write(json.dumps({"times_ms": times}) + "\n")
        else:
            proto.write(json.dumps({"error": f"unknown command {req}"}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["prepare-torch", "prepare-ort-int8", "prepare-tflite", "serve"])
    ap.add_argument("kind", nargs="?")
    ap.add_argument("--model", required=True)
    ap.add_argument("--zoo", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--calib")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=3, help="serve: warm-up runs after loading")
    ap.add_argument("--seed", type=int, default=0, help="prepare-torch: export_zoo.py's --seed")
    ap.add_argument("--bn-passes", type=int, default=4, help="prepare-torch: export_zoo.py's --bn-passes")
    ap.add_argument("--bn-batch", type=int, default=8, help="prepare-torch: export_zoo.py's --bn-batch")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if a.command == "serve":
        return serve(a)
    fn = {"prepare-torch": prepare_torch, "prepare-ort-int8": prepare_ort_int8, "prepare-tflite": prepare_tflite}
    res = fn[a.command](a)
    sys.stdout.flush()
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
