#!/usr/bin/env python3
"""The official ONNX backend node tests against our importer and CLI.

The cases come from the installed `onnx` package (onnx.backend.test.case.node,
generated in memory: nothing of them is committed). Each case's first graph
input is fed at run time; its other inputs (weights, shapes, axes) become
initializers, as a trained model holds them. Per case:

    softneuro import case.onnx -o case.dnn
    softneuro run case.dnn --input x=x.npy --output y=y.npy ... --repeat 1 --top 0

and each output is compared with the case's expected one (shape, then values
within rtol 1e-3 and atol 1e-5, ONNX's backend-test tolerances, widened for
float32). tests/onnx_node/expected_failures.txt lists the cases known to fail,
each with its reason; a case failing that is not on the list fails the run.

    python tests/onnx_node/run.py [--cli build/softneuro] [--jobs N] [--filter SUBSTR]
                                  [--update] [--report FILE]

--update rewrites the list from this run's failures. Exit status 1 when a case
fails that the list does not name.
"""
import argparse
import collections
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import numpy_helper, version_converter
from onnx.backend.test.case import node as node_cases

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LIST = os.path.join(HERE, "expected_failures.txt")


def one_line(text, limit=160):
    text = re.sub(r"/\S*/case\.(onnx|dnn)", r"case.\1", text)  # no temporary folders in the list
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    line = next((l for l in lines if "error" in l.lower()), lines[0] if lines else "")
    for prefix in ("softneuro: error: ", "softneuro: "):
        if line.startswith(prefix):
            line = line[len(prefix):]
    return line[:limit]


def as_array(value):
    """A case's value as an ndarray (numpy scalars and TensorProtos too); sequences and optionals refused."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    raise TypeError(f"a {type(value).__name__} value (sequences and optionals are not tensors)")


def with_constants(model, inputs):
    """The model with every graph input but the first made an initializer of its test value."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    fed = g.input[0].name if len(g.input) else None
    keep = []
    for k, vi in enumerate(list(g.input)):
        if k == 0:
            keep.append(vi)
            continue
        value = inputs[k] if k < len(inputs) else None
        if value is None or not isinstance(value, np.ndarray):
            keep.append(vi)
            continue
        g.initializer.append(numpy_helper.from_array(value, vi.name))
        if m.ir_version < 4:  # before IR 4 an initializer is listed among the inputs too (the version converter needs it)
            keep.append(vi)
    del g.input[:]
    g.input.extend(keep)
    return m, fed


def run_case(case, cli, tmp_root):
    """(name, op, None) when it passes, else (name, op, reason)."""
    op = case.model.graph.node[0].op_type if case.model.graph.node else "?"
    if not case.data_sets:
        return case.name, op, "no data set"
    inputs, outputs = case.data_sets[0]
    try:
        inputs, outputs = [as_array(v) for v in inputs], [as_array(v) for v in outputs]
    except (TypeError, ValueError) as e:
        return case.name, op, str(e)
    tmp = tempfile.mkdtemp(dir=tmp_root)
    model, fed = with_constants(case.model, inputs)
    # Below our first opset: converted up as a user re-exporting the model would (the CLI says to).
    default = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if default and default[0].version < 11:
        try:
            model = version_converter.convert_version(model, 11)
        except Exception as e:  # noqa: BLE001 (the converter raises many kinds)
            return case.name, op, f"onnx's version converter cannot bring opset {default[0].version} to 11: {one_line(str(e))}"
    path = os.path.join(tmp, "case.onnx")
    onnx.save(model, path)
    dnn = os.path.join(tmp, "case.dnn")
    try:
        r = subprocess.run([cli, "import", path, "-o", dnn], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return case.name, op, "import: timed out (120 s)"
    if r.returncode:
        return case.name, op, "import: " + one_line(r.stderr or r.stdout)
    cmd = [cli, "run", dnn, "--repeat", "1", "--top", "0"]
    if fed is not None and len(inputs):
        x = os.path.join(tmp, "x.npy")
        np.save(x, inputs[0])
        cmd += ["--input", f"{fed}={x}"]
    names = [o.name for o in case.model.graph.output]
    for k, name in enumerate(names):
        cmd += ["--output", f"{name}={os.path.join(tmp, f'y{k}.npy')}"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return case.name, op, "run: timed out (120 s)"
    if r.returncode:
        return case.name, op, "run: " + one_line(r.stderr or r.stdout)
    for k, (name, want) in enumerate(zip(names, outputs)):
        try:
            got = np.load(os.path.join(tmp, f"y{k}.npy"))
        except OSError:
            return case.name, op, f"output '{name}' not written"
        if got.dtype.kind == "V" and got.dtype.itemsize == want.dtype.itemsize:
            got = got.view(want.dtype)  # bfloat16, float8, int4...: .npy has no such types (ml_dtypes saves voids)
        if got.shape != want.shape:
            return case.name, op, f"output '{name}' has shape {list(got.shape)}, expected {list(want.shape)}"
        if want.dtype == np.bool_ or want.dtype.kind in "iu" or want.dtype.name in ("int4", "uint4", "int2", "uint2"):
            if not np.array_equal(got.astype(np.float64), want.astype(np.float64)):
                return case.name, op, f"output '{name}' differs in {int(np.sum(got != want))} of {want.size} values"
            continue
        if want.dtype.kind != "f" and not want.dtype.name.startswith(("bfloat16", "float8", "float4")):  # ml_dtypes' floats
            return case.name, op, f"output '{name}' of dtype {want.dtype}"
        g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        # bfloat16 holds 8 significant bits: a result computed in float32 and rounded once may
        # differ from one computed in bfloat16 steps by its last place (2^-7 relative).
        rtol = 2.0 ** -7 if want.dtype.name == "bfloat16" else 1e-3
        ok = np.isclose(g, w, rtol=rtol, atol=1e-5) | both_nan | ((g == w) & np.isinf(w))
        if not ok.all():
            bad = ~ok
            d = np.abs(g[bad] - w[bad])
            diff = float(np.max(d[~np.isnan(d)])) if (~np.isnan(d)).any() else float("nan")
            return case.name, op, f"output '{name}': {int(bad.sum())} of {w.size} values differ (max |diff| {diff:.3g})"
    return case.name, op, None


def read_list():
    expected = {}
    if os.path.exists(LIST):
        with open(LIST) as f:
            for line in f:
                line = line.rstrip("\n")
                if line and not line.startswith("#"):
                    name, _, reason = line.partition("\t")
                    expected[name] = reason
    return expected


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--filter", default="")
    p.add_argument("--update", action="store_true")
    p.add_argument("--report", default="")
    args = p.parse_args()
    # The cases draw random values from numpy's global generator: seeded, so every run feeds the same ones.
    np.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own overflow and divide-by-zero cases
        cases = [c for c in node_cases.collect_testcases(None) if args.filter in c.name]
    env_cli = os.path.abspath(args.cli)
    with tempfile.TemporaryDirectory() as tmp_root, concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: run_case(c, env_cli, tmp_root), cases))
    expected = read_list()
    by_op = collections.defaultdict(lambda: [0, 0])
    new_failures, now_passing = [], []
    for name, op, reason in results:
        by_op[op][1] += 1
        if reason is None:
            by_op[op][0] += 1
            if name in expected:
                now_passing.append(name)
        elif name not in expected:
            new_failures.append((name, reason))
    passed = sum(1 for r in results if r[2] is None)
    lines = [f"onnx {onnx.__version__}: {passed} of {len(results)} node tests pass"]
    lines += [f"  {op}: {ok}/{total}" for op, (ok, total) in sorted(by_op.items())]
    if args.report:
        with open(args.report, "w") as f:
            f.write("\n".join(lines) + "\n")
            for name, op, reason in results:
                f.write(f"{name}\t{op}\t{reason or 'pass'}\n")
    print(lines[0])
    if args.update:
        keep = {} if args.filter == "" else {k: v for k, v in expected.items() if args.filter not in k}
        keep.update({name: reason for name, _, reason in results if reason is not None})
        with open(LIST, "w") as f:
            f.write("# ONNX node tests (onnx.backend.test.case.node) expected to fail, with the reason each fails:\n"
                    "# written by tests/onnx_node/run.py --update; a case failing that is not here fails CI.\n")
            for name in sorted(keep):
                f.write(f"{name}\t{keep[name]}\n")
        print(f"{LIST}: {len(keep)} expected failures written")
        return 0
    for name in now_passing:
        print(f"now passes (remove it from {os.path.relpath(LIST, ROOT)}): {name}")
    for name, reason in new_failures:
        print(f"FAILED (not an expected failure): {name}: {reason}")
    print(f"ONNX node tests: {passed} of {len(results)} pass; {len(new_failures)} fail unexpectedly, "
          f"{len(results) - passed - len(new_failures)} as listed")
    return 1 if new_failures else 0


if __name__ == "__main__":
    sys.exit(main())
