#!/usr/bin/env python3
"""Does tuning keep a trained text recogniser's answers? PP-OCRv4's recogniser on rendered lines.

    bench/.venv/bin/python bench/real/ocr_accuracy.py [--cli build/softneuro] [--lines 40] [--out FILE.md]
        [--variants float32,budget3]

Renders text lines (words, numbers, punctuation; the DejaVu fonts Debian ships) as PaddleOCR's
recogniser expects them (height 48, width padded to 320, (x/255 - 0.5) / 0.5), a calibration set
(--cal-lines) and a separate test set (--lines). Tunes the model (imported at 1x3x48x320):
  float32     the default schemas;
  qint8       cpu:qint8:* only, calibrated on the calibration lines, no accuracy budget;
  hybrid      cpu:float32:* + cpu:qint8:*, the same calibration, no accuracy budget;
  budget      the same under the default budget (ctc:0.95 for this [1, 40, 6625] output, whose
              class 0, the CTC blank, wins most positions: the line a greedy decoder reads),
              validated on every fourth calibration line (softneuro tune --calibration DIR);
  no-samples  cpu:float32:* + cpu:qint8:* + cpu:bfloat16:*, no --calibration: nothing below
              float32 may be chosen (issue 82);
  unchecked   the same with --accuracy none: reduced precision allowed, recorded as unchecked;
  budget3     the three schemas with the calibration lines, under the default budget;
  bfloat16    cpu:float32:* + cpu:bfloat16:*, the same, under the default budget (what
              OpenVINO's default precision computes in on CPUs with AVX512_BF16 or AMX);
runs each on the test lines, decodes CTC greedily with the dictionary stored in the model's
metadata, and prints exact lines and character error rate against the rendered text, with each
file's median latency (fresh `softneuro run` processes, interleaved rounds) in the same run.
The model comes from shared/real-models (fetch.sh) in ~/.cache/softneuro/real-models.
"""
import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from PIL import Image, ImageDraw, ImageFont

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.expanduser("~/.cache/softneuro/real-models/ch_PP-OCRv4_rec_infer.onnx")
FONTS = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
         "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"]
THREE = "cpu:float32:*,cpu:qint8:*,cpu:bfloat16:*"
WORDS = ("invoice total amount date order number customer address street city price quantity item "
         "delivery payment account balance receipt station platform train departure arrival gate "
         "model serial version license expires valid member since phone email office floor room").split()


def text_line(rng):
    parts = []
    for _ in range(rng.randint(2, 4)):
        r = rng.random()
        if r < 0.6:
            w = rng.choice(WORDS)
            parts.append(w.capitalize() if rng.random() < 0.3 else w)
        elif r < 0.85:
            parts.append(str(rng.randint(0, 99999)))
        else:
            parts.append(f"{rng.randint(1, 31):02d}-{rng.randint(1, 12):02d}-20{rng.randint(10, 29)}")
    s = " ".join(parts)
    if rng.random() < 0.3:
        s += rng.choice([":", ".", ","])
    return s


def render(text, font_path):
    font = ImageFont.truetype(font_path, 30)
    box = font.getbbox(text)
    img = Image.new("RGB", (box[2] - box[0] + 16, box[3] - box[1] + 16), "white")
    ImageDraw.Draw(img).text((8 - box[0], 8 - box[1]), text, font=font, fill="black")
    return img


def preprocess(img, height=48, width=320):
    w = min(width, int(np.ceil(height * img.width / img.height)))
    x = np.asarray(img.resize((w, height), Image.BILINEAR), dtype=np.float32).transpose(2, 0, 1) / 255.0
    x = (x - 0.5) / 0.5
    out = np.zeros((1, 3, height, width), np.float32)
    out[0, :, :, :w] = x
    return out


def make_set(rng, n, folder):
    os.makedirs(folder, exist_ok=True)
    texts, files = [], []
    for k in range(n):
        while True:  # a line that fits 320 wide at height 48, as PaddleOCR's recogniser reads it
            t = text_line(rng)
            img = render(t, FONTS[k % len(FONTS)])
            if img.width / img.height <= 320 / 48:
                break
        f = os.path.join(folder, f"line{k:03d}.npy")
        np.save(f, preprocess(img))
        texts.append(t)
        files.append(f)
    return texts, files


def dictionary():
    m = onnx.load(MODEL, load_external_data=False)
    chars = next(p.value for p in m.metadata_props if p.key == "character").split("\n")
    return ["<blank>"] + chars + [" "]  # PaddleOCR's CTC decoder: blank first, space last


def decode(probs, chars):
    idx = probs[0].argmax(-1)
    out, prev = [], 0
    for i in idx:
        if i != prev and i != 0:
            out.append(chars[i])
        prev = i
    return "".join(out)


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, cb in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (ca != cb))
    return d[len(b)]


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/softneuro"))
    ap.add_argument("--lines", type=int, default=40)
    # 96: every fourth validates, and 24 lines resolve the default budget (ctc:0.95 needs 20;
    # with 48 no path below float32 could be kept).
    ap.add_argument("--cal-lines", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--variants", help="comma-separated subset of the variants below (default: all)")
    a = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL} missing: run shared/real-models/fetch.sh")
    chars = dictionary()
    work = tempfile.mkdtemp(prefix="ocr_accuracy.")
    cal_texts, _ = make_set(random.Random(1), a.cal_lines, os.path.join(work, "calibration"))
    test_texts, test_files = make_set(random.Random(2), a.lines, os.path.join(work, "test"))
    base = os.path.join(work, "rec.dnn")
    sh([a.cli, "import", MODEL, "-o", base, "--input-shape", "x=1x3x48x320"])
    cal = ["--calibration", os.path.join(work, "calibration")]
    variants = {
        "float32": [],
        "qint8": ["--schemas", "cpu:qint8:*", "--accuracy", "none"] + cal,
        "hybrid": ["--schemas", "cpu:float32:*,cpu:qint8:*", "--accuracy", "none"] + cal,
        "budget": ["--schemas", "cpu:float32:*,cpu:qint8:*"] + cal,
        "no-samples": ["--schemas", THREE],
        "unchecked": ["--schemas", THREE, "--accuracy", "none"],
        "budget3": ["--schemas", THREE] + cal,
        "bfloat16": ["--schemas", "cpu:float32:*,cpu:bfloat16:*"] + cal,
    }
    if a.variants:
        unknown = set(a.variants.split(",")) - set(variants)
        if unknown:
            sys.exit(f"unknown variants {sorted(unknown)}: choose among {sorted(variants)}")
        variants = {k: v for k, v in variants.items() if k in a.variants.split(",")}
    files, notes = {"untuned": base}, {}
    for name, extra in variants.items():
        out = os.path.join(work, f"rec.{name}.dnn")
        log = sh([a.cli, "tune", base, "-o", out, "--cache", os.path.join(work, "cache"),
                  "--report", out + ".txt"] + extra)
        report = open(out + ".txt").read()
        m = re.search(r"accuracy budget .*", report)
        notes[name] = (m.group(0) if m else "") + (" (kept the untuned default)" if "its routines are kept" in report else "")
        m = re.search(r"nothing below float32 chosen.*", log)
        if m:
            notes[name] += "; said: " + m.group(0)
        inspect = sh([a.cli, "inspect", out])
        steps = [line for line in inspect.splitlines() if " adapt " not in line]
        notes[name] += (f"; steps in qint8 {sum('cpu:qint8' in line for line in steps)}, "
                        f"bfloat16 {sum('cpu:bfloat16' in line for line in steps)}")
        notes[name] += "; inspect: " + re.search(r"accuracy: .*", inspect).group(0)
        for pattern in (r"range method .*", r"bias correction .*", r"weights stored as int8.*"):
            m = re.search(pattern, report)
            if m:
                notes[name] += "; " + m.group(0)
        files[name] = out
        print(f"tuned {name}: {notes[name]}", flush=True)
    rows = {}
    for name, path in files.items():
        sh([a.cli, "run", path, "--input", "x=" + ",".join(test_files), "--output",
            f"softmax_11.tmp_0={work}/{name}.out.npy", "--repeat", "1"])
        got = [decode(np.load(f"{work}/{name}.out.{k}.npy"), chars) for k in range(len(test_files))]
        exact = sum(g == t for g, t in zip(got, test_texts))
        cer = sum(edit_distance(g, t) for g, t in zip(got, test_texts)) / sum(len(t) for t in test_texts)
        rows[name] = [exact, cer, []]
    for r in range(a.rounds):
        order = list(files) if r % 2 == 0 else list(reversed(files))
        for name in order:
            text = sh([a.cli, "run", files[name], "--input", f"x={test_files[0]}", "--repeat", "30"])
            rows[name][2].append(float(re.search(r"median ([0-9.]+) ms", text).group(1)))
    lines = [f"{a.lines} test lines (rendered, DejaVu Sans/Serif/Mono), calibration on {a.cal_lines} other lines",
             "", "| path | exact lines | character error | median ms | tuning |", "|---|---|---|---|---|"]
    for name, (exact, cer, ms) in rows.items():
        lines.append(f"| {name} | {exact}/{len(test_texts)} | {cer:.3%} | {statistics.median(ms):.2f} | {notes.get(name, '')} |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(f"`{' '.join(sys.argv)}`\n\n{table}\n")


if __name__ == "__main__":
    main()
