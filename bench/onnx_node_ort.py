#!/usr/bin/env python3
"""ONNX Runtime on the ONNX node tests, fed as tests/onnx_node/run.py feeds ours
(the first input fed, the others made initializers, opsets below 11 brought to
11 by onnx's version converter, the same tolerances), for the count beside ours.

    bench/.venv/bin/python bench/onnx_node_ort.py [--filter SUBSTR]
"""
import argparse
import os
import sys
import warnings

import numpy as np
import onnx.backend.test.case.node as node_cases
import onnxruntime as ort
from onnx import version_converter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "onnx_node"))
import run as harness  # noqa: E402


def passes(case):
    if not case.data_sets:
        return False
    inputs, outputs = case.data_sets[0]
    inputs, outputs = [harness.as_array(v) for v in inputs], [harness.as_array(v) for v in outputs]
    model, fed = harness.with_constants(case.model, inputs)
    default = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if default and default[0].version < 11:
        model = version_converter.convert_version(model, 11)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {fed: inputs[0]} if fed is not None and len(inputs) else {})
    if len(got) != len(outputs):
        return False
    for g, w in zip(got, outputs):
        g = np.asarray(g)
        if g.shape != w.shape:
            return False
        if w.dtype == np.bool_ or w.dtype.kind in "iu":
            if not np.array_equal(g.astype(np.float64), w.astype(np.float64)):
                return False
            continue
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                return False
            continue
        gg, ww = g.astype(np.float64), w.astype(np.float64)
        ok = np.isclose(gg, ww, rtol=1e-3, atol=1e-5) | (np.isnan(gg) & np.isnan(ww)) | ((gg == ww) & np.isinf(ww))
        if not ok.all():
            return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    ort.set_default_logger_severity(4)
    cases = [c for c in node_cases.collect_testcases(None) if a.filter in c.name]
    passed = 0
    for case in cases:
        try:
            passed += passes(case)
        except Exception:  # noqa: BLE001 (a refusal of any kind is a failure)
            pass
    print(f"ONNX Runtime {ort.__version__}: {passed} of {len(cases)} node tests pass")


if __name__ == "__main__":
    main()
