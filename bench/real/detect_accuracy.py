#!/usr/bin/env python3
"""Does tuning keep a trained detector's boxes? YOLOv8n (nudenet 3.4.2) on rendered scenes.

    bench/.venv/bin/python bench/real/detect_accuracy.py [--cli build/softneuro] [--scenes 20] [--out FILE.md]

Renders scenes (check_real.scene with other seeds: skin-toned and coloured shapes on a textured
background, 320x320), a calibration set and a separate test set. Tunes the model (imported at
1x3x320x320) five ways:
  float32      the default schemas;
  qint8        cpu:qint8:* only, calibrated on the calibration scenes, no accuracy budget;
  hybrid       cpu:float32:* + cpu:qint8:*, the same calibration, no accuracy budget;
  default      the same under the default budget (top1:0.99: argmax over the output's last
               axis, which for YOLO's [1, 4 + classes, anchors] says little: the docs tell
               detectors to give cosine or rel-l2);
  cosine       the same under --accuracy cosine:0.999;
runs each on the test scenes, decodes boxes (score >= 0.05, per-class NMS 0.45: check_real's
decoder), and compares them with the untuned float32 net's boxes on the same scene (the float32
model is the reference: these scenes have no labels): boxes matched (same class, IoU >= 0.5),
boxes missing and extra, mean IoU and mean score change of the matched ones, and the raw output's
cosine; with each file's median latency (fresh `softneuro run` processes, interleaved rounds).
The model comes from shared/real-models (fetch.sh) in ~/.cache/softneuro/real-models.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_real import detections, iou  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.expanduser("~/.cache/softneuro/real-models/320n.onnx")


def scene(seed, size=320):
    """check_real.scene's generator with a seed of its own."""
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(40, 140, 3)))
    d = ImageDraw.Draw(img)
    for _ in range(40):
        x, y = rng.integers(0, size, 2)
        d.line((int(x), int(y), int(x) + int(rng.integers(-60, 60)), int(y) + int(rng.integers(-60, 60))),
               fill=tuple(int(v) for v in rng.integers(40, 200, 3)), width=2)
    for k in range(int(rng.integers(4, 10))):
        x, y = rng.integers(20, size - 80, 2)
        w, h = rng.integers(30, 90, 2)
        tone = (224, 172, 140) if k % 2 == 0 else (198, 134, 106)
        d.ellipse((int(x), int(y), int(x + w), int(y + h)), fill=tone)
    a = np.asarray(img, dtype=np.float32) / 255.0
    return a.transpose(2, 0, 1)[None].copy()


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout + r.stderr


def compare(ref, got):
    """Boxes of `got` matched to `ref` (same class, IoU >= 0.5, greedy by score): matched, missing, extra, IoUs, score changes."""
    used, ious, dscore = set(), [], []
    for r in ref:
        best, k = 0.0, None
        for j, g in enumerate(got):
            if j in used or g[5] != r[5]:
                continue
            v = iou(r, g)
            if v > best:
                best, k = v, j
        if k is not None and best >= 0.5:
            used.add(k)
            ious.append(best)
            dscore.append(abs(got[k][4] - r[4]))
    return len(ious), len(ref) - len(ious), len(got) - len(ious), ious, dscore


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/softneuro"))
    ap.add_argument("--scenes", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} missing: run shared/real-models/fetch.sh")
    work = tempfile.mkdtemp(prefix="detect_accuracy.")
    cal_dir, test_dir = os.path.join(work, "calibration"), os.path.join(work, "test")
    os.makedirs(cal_dir)
    os.makedirs(test_dir)
    for k in range(a.scenes):
        np.save(os.path.join(cal_dir, f"s{k:03d}.npy"), scene(1000 + k))
    test_files = []
    for k in range(a.scenes):
        test_files.append(os.path.join(test_dir, f"t{k:03d}.npy"))
        np.save(test_files[-1], scene(2000 + k))
    base = os.path.join(work, "yolo.dnn")
    sh([a.cli, "import", MODEL, "-o", base, "--input-shape", "images=1x3x320x320"])
    out_name = re.search(r"^output\s+(\S+)\s+\[", sh([a.cli, "inspect", base]), re.M).group(1)
    cal = ["--calibration", cal_dir]
    hybrid = ["--schemas", "cpu:float32:*,cpu:qint8:*"]
    variants = {
        "float32": [],
        "qint8": ["--schemas", "cpu:qint8:*", "--accuracy", "none"] + cal,
        "hybrid": hybrid + ["--accuracy", "none"] + cal,
        "default": hybrid + cal,
        "cosine": hybrid + ["--accuracy", "cosine:0.999"] + cal,
    }
    files, notes = {"untuned": base}, {}
    for name, extra in variants.items():
        out = os.path.join(work, f"yolo.{name}.dnn")
        sh([a.cli, "tune", base, "-o", out, "--cache", os.path.join(work, "cache"), "--report", out + ".txt"] + extra)
        report = open(out + ".txt").read()
        parts = [m.group(0) for p in (r"accuracy budget .*", r"range method .*", r"bias correction .*") if (m := re.search(p, report))]
        qint8_layers = len(re.findall(r"^\S+\s+\S+\s+cpu:qint8", report, re.M))
        parts.append(f"{qint8_layers} layers in qint8")
        if "its routines are kept" in report:
            parts.append("kept the untuned default")
        notes[name] = "; ".join(parts)
        files[name] = out
        print(f"tuned {name}: {notes[name]}", flush=True)
    outputs = {}
    for name, path in files.items():
        sh([a.cli, "run", path, "--input", "images=" + ",".join(test_files), "--output", f"{out_name}={work}/{name}.out.npy",
            "--repeat", "1", "--top", "0"])
        outputs[name] = [np.load(f"{work}/{name}.out.{k}.npy") for k in range(len(test_files))]
    ref_boxes = [detections(o) for o in outputs["untuned"]]
    rows = {}
    for name, outs in outputs.items():
        matched = missing = extra = 0
        ious, dscore, cos = [], [], []
        for o, ref, r in zip(outs, ref_boxes, outputs["untuned"]):
            m, mi, ex, i, d = compare(ref, detections(o))
            matched, missing, extra = matched + m, missing + mi, extra + ex
            ious += i
            dscore += d
            x, y = o.ravel().astype(np.float64), r.ravel().astype(np.float64)
            cos.append(float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y))))
        rows[name] = [matched, missing, extra, np.mean(ious) if ious else float("nan"),
                      np.mean(dscore) if dscore else float("nan"), min(cos), []]
    for r in range(a.rounds):
        order = list(files) if r % 2 == 0 else list(reversed(files))
        for name in order:
            text = sh([a.cli, "run", files[name], "--input", f"images={test_files[0]}", "--repeat", "30", "--top", "0"])
            rows[name][6].append(float(re.search(r"median ([0-9.]+) ms", text).group(1)))
    total = sum(len(b) for b in ref_boxes)
    lines = [f"{a.scenes} test scenes (rendered, 320x320), calibration on {a.scenes} other scenes; "
             f"{total} boxes from the untuned float32 net (score >= 0.05, NMS 0.45) are the reference", "",
             "| path | boxes matched | missing | extra | mean IoU | mean score change | min output cosine | median ms | tuning |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, (m, mi, ex, mean_iou, ds, cmin, ms) in rows.items():
        lines.append(f"| {name} | {m}/{total} | {mi} | {ex} | {mean_iou:.4f} | {ds:.4f} | {cmin:.5f} | "
                     f"{statistics.median(ms):.2f} | {notes.get(name, '')} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(f"`{' '.join(sys.argv)}`\n\n{table}\n")


if __name__ == "__main__":
    main()
