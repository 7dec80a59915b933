#!/usr/bin/env python3
"""Per-layer truth against the peers: where does each engine spend its time?

Runs one ONNX model under ONNX Runtime's profiler and OpenVINO's per-layer
performance counters, and our .dnn files (untuned, tuned, hybrid: any number)
with `softneuro run --steps`, in interleaved rounds (every contender once per
round, the same input), and prints, layer by layer, each one's median time:

    bench/.venv/bin/python bench/compare/per_layer.py MODEL.onnx --dnn tuned=M.dnn [--dnn hybrid=H.dnn]
        [--onnx-int8 M_int8.onnx] [--openvino-default] [--input x=1x3x224x224] [--threads 2] [--runs 20] [--rounds 3]
        [--cli build/softneuro] [--out bench/results/per_layer_M.md] [--top 40]

Layers are matched by the ONNX node name the importer keeps (a fused
Conv+Relu is the Conv's name in every engine; OpenVINO names a fused node
after one of its nodes, tried both ways). A table by operator type follows,
where names do not match (each engine fuses differently), and the totals: the
sum of the steps against the whole-run median (the difference is the
engine's dispatch between steps).

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
            steps = {}
            with open(tsv) as f:
                header = f.readline().rstrip("\n").split("\t")
                for line in f:
                    row = dict(zip(header, line.rstrip("\n").split("\t")))
                    if row["fused_into"]:
                        continue
                    kind = row["type"] if row["type"] != "adapt" else "adapt"
                    steps[row["layer"]] = (f"{kind} [{row['descriptor']}]", float(row["ms"]))
        return steps, total


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
        for path in paths:
            m = onnx.load(path, load_external_data=False)
            for n in m.graph.node:
                self.nodes.setdefault(n.name, n)
                for o in n.output:
                    self.producer.setdefault(o, n)

    def anchor(self, node):
        seen = 0
        while node.op_type in ABSORBED and node.input and node.input[0] in self.producer and seen < 8:
            node = self.producer[node.input[0]]
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
    lines.append("| layer | op | " + " | ".join(labels) + " |")
    lines.append("|---|---|" + "---|" * len(labels))
    for worst, n, op, vals in rows[: args.top]:
        cells = [f"{v:.3f}" if v is not None else "-" for v in vals]
        lines.append(f"| {n} | {op} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
