#!/usr/bin/env python3
"""Per-layer truth against the peers: where does each engine spend its time?

Runs one ONNX model under ONNX Runtime's profiler and OpenVINO's per-layer
performance counters, and our .dnn files (untuned, tuned, hybrid: any number)
with `softneuro run --steps`, in interleaved rounds (every contender once per
round, the same input), and prints, layer by layer, each one's median time:

    bench/.venv/bin/python bench/compare/per_layer.py MODEL.onnx --dnn tuned=M.dnn [--dnn hybrid=H.dnn]
        [--onnx-int8 M_int8.onnx] [--openvino-default] [--input x=1x3x224x224] [--threads 2] [--runs 20] [--rounds 3]
        [--cli build/softneuro] [--out bench/results/per_layer_M.md] [--top 40] [--peak GFLOPS]

Layers are matched by the ONNX node name the importer keeps (a fused
Conv+Relu is the Conv's name in every engine; OpenVINO names a fused node
after one of its nodes, tried both ways). A table by operator type follows,
where names do not match (each engine fuses differently), and the totals: the
sum of the steps against the whole-run median (the difference is the
engine's dispatch between steps). Beside each convolution and matrix product,
its physical limit: its multiply-accumulates at the float32 FMA peak measured
at the start (conv_bench --peak-only) and at the int8 rate (4x with VNNI).

Needs onnxruntime and openvino in bench/.venv (bench/compare/run.sh installs
them); a peer that is missing is reported as skipped.
"""
import argparse
import collections
import re
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (machine_info)
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_shape(text):
    return [int(d) for d in text.lower().split("x")]


def model_precision(path):
    """'int8' where the file holds quantised operators (QDQ or QLinear*: the
    peers then run int8), else 'fp32': the peers' labels say which."""
    import onnx
    ops = {n.op_type for n in onnx.load(path, load_external_data=False).graph.node}
    return "int8" if ops & {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"} else "fp32"


def onnx_inputs(path, given):
    """The model's first input's name and a concrete shape (given dims, else 1 for the batch, 224 otherwise)."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    ins = [i for i in m.graph.input if i.name not in inits]
    out = {}
    for i in ins:
        if i.name in given:
            out[i.name] = given[i.name]
            continue
        dims = []
        for k, d in enumerate(i.type.tensor_type.shape.dim):
            dims.append(d.dim_value if d.dim_value > 0 else (1 if k == 0 else 224))
        out[i.name] = dims
    return out


# --- ONNX Runtime: its profiler's per-node kernel times


class OrtRunner:
    def __init__(self, path, threads, label):
        import onnxruntime as ort
        self.label = label
        self.path = path
        self.threads = threads
        self.ort = ort

    def round(self, feeds, runs):
        ort = self.ort
        with tempfile.TemporaryDirectory() as tmp:
            so = ort.SessionOptions()
            so.intra_op_num_threads = self.threads
            so.inter_op_num_threads = 1
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(tmp, "ort")
            s = ort.InferenceSession(self.path, so, providers=["CPUExecutionProvider"])
            s.run(None, feeds)  # warm-up
            totals = []
            for _ in range(runs):
                t0 = time.perf_counter()
                s.run(None, feeds)
                totals.append((time.perf_counter() - t0) * 1e3)
            prof = s.end_profiling()
            with open(prof) as f:
                events = json.load(f)
        per = collections.defaultdict(list)
        types = {}
        for e in events:
            if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
                continue
            name = e["name"][: -len("_kernel_time")]
            per[name].append(e["dur"] / 1e3)
            types[name] = e.get("args", {}).get("op_name", "?")
        # The first (warm-up) run's events are among them: drop each node's first.
        steps = {n: (types[n], statistics.median(v[1:] if len(v) > 1 else v)) for n, v in per.items()}
        return steps, statistics.median(totals)


# --- OpenVINO: per-layer performance counters


class OvRunner:
    def __init__(self, path, threads, label, precision="f32"):
        """precision: "f32", or None for OpenVINO's default (bfloat16 on CPUs with AVX512_BF16 or AMX)."""
        import openvino as ov
        core = ov.Core()
        model = core.read_model(path)
        cfg = {"INFERENCE_NUM_THREADS": threads, "PERF_COUNT": True, "PERFORMANCE_HINT": "LATENCY"}
        if precision:
            cfg["INFERENCE_PRECISION_HINT"] = precision
        self.compiled = core.compile_model(model, "CPU", cfg)
        self.label = label if precision else f"{label} ({self.compiled.get_property('INFERENCE_PRECISION_HINT').to_string()})"
        self.request = self.compiled.create_infer_request()

    def round(self, feeds, runs):
        self.request.infer(feeds)
        per = collections.defaultdict(list)
        types = {}
        totals = []
        for _ in range(runs):
            t0 = time.perf_counter()
            self.request.infer(feeds)
            totals.append((time.perf_counter() - t0) * 1e3)
            for p in self.request.profiling_info:
                if p.status.name != "EXECUTED":
                    continue
                per[p.node_name].append(p.real_time.total_seconds() * 1e3)
                types[p.node_name] = p.node_type
        steps = {n: (types[n], statistics.median(v)) for n, v in per.items()}
        return steps, statistics.median(totals)


# --- ours: softneuro run --steps


class OursRunner:
    def __init__(self, cli, path, threads, label, input_files):
        self.label = label
        self.cli = cli
        self.path = path
        self.threads = threads
        self.input_files = input_files

    def round(self, feeds, runs):
        with tempfile.TemporaryDirectory() as tmp:
            tsv = os.path.join(tmp, "steps.tsv")
            cmd = [self.cli, "run", self.path, "--repeat", str(runs), "--threads", str(self.threads), "--top", "0",
                   "--steps", tsv]
            for name, f in self.input_files.items():
                cmd += ["--input", f"{name}={f}"]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
            total = None
            for line in out.stdout.splitlines():
                if line.startswith("latency over"):
                    total = float(line.split("median ")[1].split(" ms")[0])
            steps, rows = {}, []
            with open(tsv) as f:
                header = f.readline().rstrip("\n").split("\t")
                rows = [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f]
            # A step that computes a layer fused into it (a convolution into its
            # residual add's step) counts under that layer: the peers name it so.
            computes = {r["fused_into"]: r for r in rows if r["fused_into"]}
            for row in rows:
                if row["fused_into"]:
                    continue
                named = computes.get(row["layer"], row)
                steps[named["layer"]] = (f"{named['type']} [{row['descriptor']}]", float(row["ms"]))
        return steps, total


def node_macs(path, shapes):
    """Multiply-accumulates of each convolution and matrix product node (by
    name) at the given input shapes, from ONNX shape inference; nodes whose
    shapes it leaves unknown are left out."""
    import onnx
    from onnx import shape_inference
    m = onnx.load(path, load_external_data=False)  # dims only, as the other loaders here
    for i in m.graph.input:
        if i.name in shapes:
            for d, v in zip(i.type.tensor_type.shape.dim, shapes[i.name]):
                d.ClearField("dim_param")
                d.dim_value = v
    try:
        m = shape_inference.infer_shapes(m)
    except Exception as e:  # a model the checker refuses: no limits, the rest of the table stands
        print(f"per_layer: no shapes for the limits ({e})", file=sys.stderr)
        return {}
    known = {i.name: list(i.dims) for i in m.graph.initializer}
    for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in vi.type.tensor_type.shape.dim]
        if dims and all(dims):
            known.setdefault(vi.name, dims)
    prod = lambda xs: int(np.prod(xs, dtype=np.int64))
    out = {}
    for n in m.graph.node:
        y = known.get(n.output[0]) if n.output else None
        if n.op_type in ("Conv", "ConvInteger", "QLinearConv"):
            w = known.get(n.input[3 if n.op_type == "QLinearConv" else 1])
            if y and w:
                out[n.name] = prod(y) * prod(w[1:])  # N*OC*OH*OW * (IC/group)*KH*KW
        elif n.op_type == "ConvTranspose":
            x, w = known.get(n.input[0]), known.get(n.input[1])
            if x and w:
                out[n.name] = prod(x) * prod(w[1:])
        elif n.op_type in ("MatMul", "MatMulInteger", "Gemm", "FusedMatMul"):
            a = known.get(n.input[0])
            trans_a = any(at.name == "transA" and at.i for at in n.attribute)
            if y and a:
                out[n.name] = prod(y) * (a[-2] if trans_a and len(a) >= 2 else a[-1])
    return out


def fma_peak(cli, threads, given):
    """(GFLOP/s, ISA) of the float32 FMA peak at `threads`: given, or measured by
    conv_bench --peak-only beside the CLI (the widest ISA it probes)."""
    if given:
        return given, "given"
    bench = os.path.join(os.path.dirname(os.path.abspath(cli)), "conv_bench")
    if not os.path.exists(bench):
        return None, None
    run = subprocess.run([bench, "--peak-only", "--threads", str(threads)], capture_output=True, text=True)
    if run.returncode != 0:  # (an older conv_bench without --peak-only): the tables without limits
        print(f"per_layer: no FMA peak ({bench}: {run.stderr.strip()[:200]})", file=sys.stderr)
        return None, None
    out = run.stdout
    peaks = {line.split()[1]: float(line.split()[2]) for line in out.splitlines() if line.startswith("fma_peak_gflops")}
    isa = "avx512" if "avx512" in peaks else "avx2"
    return peaks.get(isa), isa


def int8_rate(flags):
    """Int8 multiply-accumulates per float32 FMA lane and cycle: 4 with VNNI
    (vpdpbusd: four u8*s8 products per 32-bit lane), 2 without (vpmaddubsw
    then vpmaddwd take two instructions)."""
    return 4 if {"avx512_vnni", "avx_vnni"} & set(flags) else 2


def merge_rounds(rounds):
    """Medians over rounds of each step's median."""
    names = collections.OrderedDict()
    for steps, _ in rounds:
        for n in steps:
            names.setdefault(n, None)
    out = {}
    for n in names:
        vals = [r[0][n][1] for r in rounds if n in r[0]]
        kind = next(r[0][n][0] for r in rounds if n in r[0])
        out[n] = (kind, statistics.median(vals))
    total = statistics.median([r[1] for r in rounds if r[1] is not None])
    return out, total


def base_type(kind):
    return kind.split(" [")[0]


# Operators each engine folds into the layer before them (fused activations,
# residual adds, quantisation steps): a layer's row sums them under the
# compute node they follow (its first input's producer).
ABSORBED = {"Relu", "Clip", "Add", "Sigmoid", "Mul", "HardSigmoid", "HardSwish", "LeakyRelu", "BatchNormalization",
            "QuantizeLinear", "DequantizeLinear", "Identity", "Tanh"}


class OnnxIndex:
    """Names in each engine's profile -> the ONNX compute node they belong to."""

    def __init__(self, paths):
        import onnx
        self.nodes, self.producer = {}, {}
        self.consumers = collections.Counter()
        for path in paths:
            m = onnx.load(path, load_external_data=False)
            for n in m.graph.node:
                self.nodes.setdefault(n.name, n)
                for o in n.output:
                    self.producer.setdefault(o, n)
                for i in n.input:
                    self.consumers[i] += 1

    def anchor(self, node):
        seen = 0
        while node.op_type in ABSORBED and node.input and seen < 8:
            # A residual add computes the convolution whose output it alone
            # reads (ours: the pair's step bears the add's name), not the other
            # operand (the block's input, read by the block too).
            ins = [i for i in node.input if i in self.producer]
            if not ins:
                break
            sole = [i for i in ins if self.consumers[i] == 1 and self.producer[i].op_type not in ABSORBED]
            node = self.producer[sole[0] if sole else ins[0]]
            seen += 1
        return node.name

    def resolve(self, name):
        if name.startswith("adapt:"):
            return "(adapts)"
        cands = [name]
        for pat in (r"_token_\d+$", r"_nchwc$", r"/WithoutBiases$", r"_kernel_time$"):
            cands += [re.sub(pat, "", c) for c in cands]
        parts = name.split("/")
        cands += ["/".join(parts[:k]) for k in range(len(parts) - 1, 1, -1)]  # a childnet's steps: their parent
        for c in cands:
            if c in self.nodes:
                return self.anchor(self.nodes[c])
            if c in self.producer:
                return self.anchor(self.producer[c])
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("onnx")
    ap.add_argument("--dnn", action="append", default=[], help="LABEL=FILE.dnn (any number)")
    ap.add_argument("--onnx-int8", help="a quantised ONNX file to run under ONNX Runtime too")
    ap.add_argument("--input", action="append", default=[], help="NAME=1x3x224x224 (seeded normal values) or NAME=FILE.npy")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--skip", action="append", default=[], help="ort, ort-int8, openvino")
    ap.add_argument("--openvino-default", action="store_true",
                    help="also OpenVINO at its default precision (bfloat16 on CPUs with AVX512_BF16 or AMX)")
    ap.add_argument("--top", type=int, default=40, help="layers shown (the slowest in any contender)")
    ap.add_argument("--out", help="also write the tables here (Markdown)")
    ap.add_argument("--peak", type=float, help="float32 FMA peak, GFLOP/s at --threads (default: conv_bench --peak-only)")
    args = ap.parse_args()

    given, loaded = {}, {}
    for spec in args.input:
        name, value = spec.split("=", 1)
        if value.endswith(".npy"):  # token ids, masks: integer inputs as they are
            loaded[name] = np.load(value)
            given[name] = list(loaded[name].shape)
        else:
            given[name] = parse_shape(value)
    shapes = onnx_inputs(args.onnx, given)
    rng = np.random.default_rng(0)
    feeds = {n: loaded[n] if n in loaded else rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    tmp = tempfile.mkdtemp(prefix="per_layer_")
    files = {}
    for n, a in feeds.items():
        files[n] = os.path.join(tmp, f"{n.replace('/', '_')}.npy")
        np.save(files[n], a)

    runners, skipped = [], []
    precision = model_precision(args.onnx)
    if "ort" not in args.skip:
        try:
            runners.append(OrtRunner(args.onnx, args.threads, f"ORT {precision}"))
        except ImportError as e:
            skipped.append(f"ORT {precision} ({e})")
    if args.onnx_int8 and "ort-int8" not in args.skip:
        try:
            runners.append(OrtRunner(args.onnx_int8, args.threads, "ORT int8"))
        except ImportError as e:
            skipped.append(f"ORT int8 ({e})")
    if "openvino" not in args.skip:
        try:
            runners.append(OvRunner(args.onnx, args.threads, f"OpenVINO {precision}"))
            if args.openvino_default:
                runners.append(OvRunner(args.onnx, args.threads, "OpenVINO default", precision=None))
        except ImportError as e:
            skipped.append(f"OpenVINO ({e})")
    for spec in args.dnn:
        label, path = spec.split("=", 1) if "=" in spec else (os.path.basename(spec), spec)
        runners.append(OursRunner(args.cli, path, args.threads, f"ours {label}", files))

    peak, peak_isa = fma_peak(args.cli, args.threads, args.peak)
    rounds = {r.label: [] for r in runners}
    for k in range(args.rounds):
        for r in runners:
            rounds[r.label].append(r.round(feeds, args.runs))
        print(f"round {k + 1}/{args.rounds} done", file=sys.stderr)
    merged = {label: merge_rounds(rs) for label, rs in rounds.items()}
    labels = list(merged)

    lines = []
    shape_text = ", ".join(f"{n}={'x'.join(map(str, s))}" for n, s in shapes.items())
    lines.append(f"# Per layer: {os.path.basename(args.onnx)} ({shape_text}), {args.threads} threads")
    lines.append("")
    machine = compare.machine_info()
    lines.append(f"CPU: {machine['cpu']} ({' '.join(machine['flags'])}), {machine['cores']} CPUs.")
    lines.append("")
    lines.append(f"{args.rounds} interleaved rounds of {args.runs} runs; medians in ms. Command: "
                 f"`bench/.venv/bin/python bench/compare/per_layer.py {' '.join(sys.argv[1:])}`")
    if skipped:
        lines.append(f"Skipped: {'; '.join(skipped)}.")
    lines.append("")
    lines.append("## Totals")
    lines.append("")
    lines.append("| contender | whole run | sum of steps | steps |")
    lines.append("|---|---|---|---|")
    for label in labels:
        steps, total = merged[label]
        lines.append(f"| {label} | {total:.2f} | {sum(v for _, v in steps.values()):.2f} | {len(steps)} |")

    macs = node_macs(args.onnx, shapes)
    vnni = int8_rate(machine["flags"])
    def limits(mac):
        """(float32 FMA, int8) limits in ms of `mac` multiply-accumulates at the peak."""
        return 2 * mac / (peak * 1e6), 2 * mac / (vnni * peak * 1e6)
    if peak and macs:
        total_mac = sum(macs.values())
        f32, i8 = limits(total_mac)
        lines.append("")
        lines.append(f"Physical limits: the float32 FMA peak measured at the start (`conv_bench --peak-only`: 12 "
                     f"independent FMA chains per thread, at the clock they ran), {peak:.0f} GFLOP/s on {args.threads} "
                     f"threads ({peak_isa}), and int8 at {vnni}x its multiply-accumulates "
                     f"({'VNNI' if vnni == 4 else 'no VNNI'}); AMX tiles (bfloat16, int8) are not counted. The convolutions and "
                     f"matrix products take {total_mac / 1e9:.2f} GMAC: at least {f32:.2f} ms in float32, {i8:.2f} ms in int8.")

    # By operator type: ours by layer type (adapts apart), ORT by op, OpenVINO by node type.
    lines.append("")
    lines.append("## By operator type (sum of step medians, ms)")
    lines.append("")
    for label in labels:
        steps, _ = merged[label]
        by = collections.Counter()
        count = collections.Counter()
        for kind, v in steps.values():
            by[base_type(kind)] += v
            count[base_type(kind)] += 1
        lines.append(f"- **{label}**: " + ", ".join(f"{t} {v:.2f} ({count[t]})" for t, v in by.most_common(12)))

    # Layer by layer: every engine's steps summed under the ONNX compute node they belong to.
    index = OnnxIndex([args.onnx] + ([args.onnx_int8] if args.onnx_int8 else []))
    grouped = {}
    for label in labels:
        g = collections.defaultdict(float)
        for n, (kind, v) in merged[label][0].items():
            key = index.resolve(n) or f"(other: {base_type(kind)})"
            g[key] += v
        grouped[label] = g
    names = collections.OrderedDict()
    for label in labels:
        for n in grouped[label]:
            names.setdefault(n, None)
    rows = []
    for n in names:
        vals = [grouped[label].get(n) for label in labels]
        op = index.nodes[n].op_type if n in index.nodes else ""
        rows.append((max(v for v in vals if v is not None), n, op, vals))
    rows.sort(key=lambda r: -r[0])
    lines.append("")
    lines.append(f"## The {min(args.top, len(rows))} slowest layers in any contender")
    lines.append("")
    lines.append("Each engine's steps summed under the ONNX node they compute (fused activations, residual adds, "
                 "quantisation and childnet steps under the compute node before them; '-': none there).")
    lines.append("")
    with_limits = bool(peak and macs)
    extra = " | GMAC | f32 limit | int8 limit" if with_limits else ""
    lines.append("| layer | op | " + " | ".join(labels) + extra + " |")
    lines.append("|---|---|" + "---|" * (len(labels) + (3 if with_limits else 0)))
    for worst, n, op, vals in rows[: args.top]:
        cells = [f"{v:.3f}" if v is not None else "-" for v in vals]
        if with_limits:
            if n in macs:
                f32, i8 = limits(macs[n])
                cells += [f"{macs[n] / 1e9:.3f}", f"{f32:.3f}", f"{i8:.3f}"]
            else:
                cells += ["-", "-", "-"]
        lines.append(f"| {n} | {op} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
