#!/usr/bin/env python3
"""Does the executor run what the tuner chose? The real models tuned hybrid
(cpu:float32:* + cpu:qint8:*, calibrated on seeded random inputs, no accuracy
budget so qint8 is taken wherever it is faster), then a session of the tuned
model at the shape it was tuned at: every layer of the tuning report must run
with the descriptor (routine and schema), routine parameters and
quantisation (scales and zero points of its blobs) the report names. Exit status 1 on any disagreement.

    bench/.venv/bin/pip install .
    bench/.venv/bin/python bench/real/check_tuned_path.py [--models DIR]
"""
import argparse
import os
import sys

import numpy as np

import softneuro

MODELS = [
    ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
    ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320)),
    ("320n.onnx", (1, 3, 320, 320)),
]


def disagreements(path, shape, rng):
    """Tunes the model at `path` hybrid at `shape`, runs a session at that shape;
    returns (report layers, layers run otherwise than the report names)."""
    m = softneuro.import_onnx(path)
    name = m.inputs[0].name
    cal = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)]
    t = softneuro.tune(m, schemas=["cpu:float32:*", "cpu:qint8:*"], calibration=cal, accuracy="none",
                       shapes=[{name: shape}], time_budget_s=60)
    s = softneuro.Session(t)
    s.run(cal[0])  # planned at the tuned shape
    ran = {layer["name"]: layer for layer in s.layers()}
    wrong = []
    for want in t.report.layers:
        got = ran.get(want["layer"])
        if got is None:
            # A childnet (Winograd) runs as its children, named "<layer>/<child>", each in the schema chosen.
            children = [l for n, l in ran.items() if n.startswith(want["layer"] + "/")]
            if not children or any(c["descriptor"].split("/")[0] != want["descriptor"].split("/")[0] for c in children):
                wrong.append(f"{want['layer']}: tuned {want['descriptor']}, runs as {[c['descriptor'] for c in children]}")
            continue
        if got["descriptor"] != want["descriptor"] or got["routine_params"] != want["routine_params"]:
            wrong.append(f"{want['layer']}: tuned {want['descriptor']} [{want['routine_params']}], "
                         f"runs {got['descriptor']} [{got['routine_params']}]")
        elif got["quant"] != want["quant"]:  # measured with one quantisation, run with another
            wrong.append(f"{want['layer']}: {want['descriptor']} measured with quantisation "
                         f"'{want['quant']}', runs with '{got['quant']}'")
        elif got["fused_into"] != want["fused_into"]:  # priced as one step with the next, run apart (or the reverse)
            wrong.append(f"{want['layer']}: priced {'fused into ' + repr(want['fused_into']) if want['fused_into'] else 'apart'}, "
                         f"runs {'fused into ' + repr(got['fused_into']) if got['fused_into'] else 'apart'}")
    # And the other way: every step the session runs, fused and viewed ones
    # included, is one the tuner priced: a layer of the report (or a child of
    # one), or an adapt of the report's (blob, schemas and routine).
    priced = {l["layer"] for l in t.report.layers}
    adapts = {(a["blob"].split("@")[0], a["from"], a["to"], a["descriptor"].split(" (")[0]) for a in t.report.adapts}
    for step in s.layers():
        if step["type"] != "adapt":
            # (A childnet's child is "<layer>/<child>", and ONNX layer names hold "/" themselves.)
            if step["name"] not in priced and step["name"].rsplit("/", 1)[0] not in priced:
                wrong.append(f"{step['name']}: runs {step['descriptor']}, a step the tuner never priced")
            continue
        blob = step["inputs"][0].split("@")[0]
        if any(blob.startswith(l + "/") for l in priced):
            continue  # between a childnet's children: priced inside its layer's cost
        to = step["descriptor"].split("/")[0]
        if not any(b == blob and d == step["descriptor"] for b, f, tt, d in adapts):
            wrong.append(f"{step['name']}: adapt {step['descriptor']} of '{blob}'"
                         f"{' (fused into ' + step['fused_into'] + ')' if step['fused_into'] else ''}, not among the "
                         f"{sum(b == blob for b, *_ in adapts)} adapts the tuner priced for it")
    return t.report.layers, wrong


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/softneuro/real-models"))
    a = ap.parse_args()
    failures = 0
    rng = np.random.default_rng(0)
    for file, shape in MODELS:
        path = os.path.join(a.models, file)
        if not os.path.exists(path):
            print(f"{file}: missing (shared/real-models/fetch.sh)")
            failures += 1
            continue
        layers, wrong = disagreements(path, shape, rng)
        qint8 = sum("qint8" in l["descriptor"] for l in layers)
        print(f"{file} at {'x'.join(map(str, shape))}: {len(layers)} layers tuned ({qint8} in qint8), "
              f"{len(wrong)} run otherwise  {'ok' if not wrong else 'FAIL'}")
        for w in wrong[:10]:
            print("  " + w)
        failures += bool(wrong)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
