#!/usr/bin/env python3
"""Trained third-party models, as a user brings them: fetched from the Python
package index, imported with their symbolic input dims, run at several shapes
in one session, every output checked against ONNX Runtime at that shape; then
YOLOv8n's detections on a rendered scene (boxes decoded and NMS here) against
ONNX Runtime's.

    bench/.venv/bin/python bench/real/check_real.py [--cli build/softneuro] [--models DIR] [--no-fetch]

Models: PP-OCRv4 text recogniser and detector and the PP-OCR direction classifier
(rapidocr-onnxruntime 1.4.4), a YOLOv8n detector (nudenet 3.4.2), downloaded with
`pip download --no-deps` into DIR (default ~/.cache/softneuro/real-models) when
missing, never committed. For each model it runs
    softneuro import MODEL.onnx -o MODEL.dnn
    softneuro run MODEL.dnn --input x=a.npy,b.npy,c.npy --output y=y.npy --repeat 1
(one process, one net: the shapes follow one another in one session) and ONNX
Runtime on the same inputs; passes where max |diff| <= 1e-4 * max |ORT| + 1e-5
at every shape. Exit status 1 when any model fails.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from real_models import fetch  # noqa: E402

# file, --input-shape for import (None: the model's own symbolic dims, no flags), shapes to run
MODELS = [
    ("ch_PP-OCRv4_rec_infer.onnx", None, [(1, 3, 48, 160), (1, 3, 48, 320), (1, 3, 48, 640)]),
    ("ch_ppocr_mobile_v2.0_cls_infer.onnx", None, [(1, 3, 48, 192), (2, 3, 48, 192), (1, 3, 48, 320)]),
    ("ch_PP-OCRv4_det_infer.onnx", None, [(1, 3, 640, 640), (1, 3, 960, 544), (1, 3, 736, 1280)]),
    # YOLOv8n: its anchor grid is computed from the input's shape at each new shape (shape_math layers)
    ("320n.onnx", None, [(1, 3, 320, 320), (1, 3, 640, 640), (1, 3, 480, 640), (2, 3, 320, 320)]),
]


def iou(a, b):
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def detections(pred, conf=0.05, iou_max=0.45, top=50):
    """YOLOv8 output [4 + classes, anchors] -> [(x1, y1, x2, y2, score, class)] after per-class NMS."""
    p = pred[0].T
    boxes, scores = p[:, :4], p[:, 4:]
    cls = scores.argmax(1)
    best = scores.max(1)
    keep = np.nonzero(best >= conf)[0]
    keep = keep[np.argsort(-best[keep])]
    out = []
    for i in keep:
        cx, cy, w, h = boxes[i]
        box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, float(best[i]), int(cls[i]))
        if all(o[5] != box[5] or iou(o, box) <= iou_max for o in out):
            out.append(box)
        if len(out) == top:
            break
    return out


def scene(size=320):
    """A rendered test scene: skin-toned and coloured shapes on a textured background, RGB in [0, 1], NCHW."""
    from PIL import Image, ImageDraw
    img = Image.new("RGB", (size, size), (70, 90, 120))
    d = ImageDraw.Draw(img)
    rng = np.random.default_rng(7)
    for _ in range(40):
        x, y = rng.integers(0, size, 2)
        d.line((int(x), int(y), int(x) + int(rng.integers(-60, 60)), int(y) + int(rng.integers(-60, 60))),
               fill=tuple(int(v) for v in rng.integers(40, 200, 3)), width=2)
    for k in range(8):
        x, y = rng.integers(20, size - 80, 2)
        w, h = rng.integers(30, 90, 2)
        tone = (224, 172, 140) if k % 2 == 0 else (198, 134, 106)
        d.ellipse((int(x), int(y), int(x + w), int(y + h)), fill=tone)
    a = np.asarray(img, dtype=np.float32) / 255.0
    return a.transpose(2, 0, 1)[None].copy()


def check_detections(cli, models, tmp):
    """YOLOv8n on a rendered scene: boxes after NMS, ours against ONNX Runtime's. Returns failures."""
    path = os.path.join(models, "320n.onnx")
    if not os.path.exists(path):
        print("320n.onnx: missing")
        return 1
    x = scene()
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    name, out_name = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    ref = detections(sess.run([out_name], {name: x})[0])
    dnn = os.path.join(tmp, "yolo.dnn")
    subprocess.run([cli, "import", path, "-o", dnn], check=True, capture_output=True)
    np.save(os.path.join(tmp, "scene.npy"), x)
    out = os.path.join(tmp, "boxes.npy")
    subprocess.run([cli, "run", dnn, "--input", f"{name}={os.path.join(tmp, 'scene.npy')}", "--output", f"{out_name}={out}",
                    "--repeat", "1", "--top", "0"], check=True, capture_output=True)
    got = detections(np.load(out))
    matched = sum(1 for r in ref if any(g[5] == r[5] and iou(g, r) >= 0.99 and abs(g[4] - r[4]) <= 1e-3 for g in got))
    ok = len(got) == len(ref) and matched == len(ref)
    print(f"320n.onnx detections on a rendered 320x320 scene (score >= 0.05, NMS 0.45): ONNX Runtime {len(ref)}, "
          f"ours {len(got)}, {matched} matched (IoU >= 0.99, score within 1e-3)  {'ok' if ok else 'FAIL'}")
    for r in ref[:5]:
        print(f"  class {r[5]} score {r[4]:.3f} box ({r[0]:.1f}, {r[1]:.1f}, {r[2]:.1f}, {r[3]:.1f})")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/softneuro/real-models"))
    ap.add_argument("--no-fetch", action="store_true", help="do not download missing models")
    args = ap.parse_args()
    if not args.no_fetch and not all(os.path.exists(os.path.join(args.models, f)) for f, _, _ in MODELS):
        fetch(args.models)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        failed += check_detections(args.cli, args.models, tmp)
        for file, input_shape, shapes in MODELS:
            path = os.path.join(args.models, file)
            if not os.path.exists(path):
                print(f"{file}: missing")
                failed += 1
                continue
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            name = sess.get_inputs()[0].name
            out_name = sess.get_outputs()[0].name
            dnn = os.path.join(tmp, file + ".dnn")
            cmd = [args.cli, "import", path, "-o", dnn] + (["--input-shape", input_shape] if input_shape else [])
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            rng = np.random.default_rng(0)
            npys, refs = [], []
            for k, shape in enumerate(shapes):
                x = rng.uniform(-1, 1, size=shape).astype(np.float32)
                npy = os.path.join(tmp, f"x{k}.npy")
                np.save(npy, x)
                npys.append(npy)
                refs.append(sess.run([out_name], {name: x})[0])
            out = os.path.join(tmp, "y.npy")
            run = subprocess.run([args.cli, "run", dnn, "--input", f"{name}={','.join(npys)}", "--output",
                                  f"{out_name}={out}", "--repeat", "1", "--top", "0"], capture_output=True, text=True)
            if run.returncode:
                print(f"{file}: run failed: {run.stderr.strip()}")
                failed += 1
                continue
            for k, (shape, ref) in enumerate(zip(shapes, refs)):
                got = np.load(os.path.join(tmp, f"y.{k}.npy"))
                if got.shape != ref.shape:
                    print(f"{file} {shape}: output shape {got.shape}, ONNX Runtime {ref.shape}  FAIL")
                    failed += 1
                    continue
                diff = float(np.max(np.abs(got - ref)))
                tol = 1e-4 * float(np.max(np.abs(ref))) + 1e-5
                ok = diff <= tol
                failed += not ok
                print(f"{file} {'x'.join(map(str, shape))}: output {'x'.join(map(str, ref.shape))}, "
                      f"max |diff| {diff:.2e} (tolerance {tol:.2e})  {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
