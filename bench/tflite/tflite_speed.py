"""TensorFlow Lite models: our imported and tuned runs against TensorFlow
Lite's interpreter (ai-edge-litert, its XNNPACK delegate on by default), in
one run, interleaved, medians of rounds.

    bench/compare/.venv-tflite/bin/python bench/tflite/tflite_speed.py [--cli build/softneuro] \
        [--threads 2] [--rounds 5] [--runs 20] MODEL.tflite [MODEL.tflite ...]

Per model: `softneuro import`, then `softneuro tune` (float32 by default, or
--schemas), then rounds of: the interpreter invoked --runs times in this
process, our untuned and tuned files run --runs times by `softneuro run`
(its own in-process timing, after one warm-up). Each round gives a median per
contender; the table gives the median of those (ms), and the median over
rounds of each round's ratio interpreter / ours-tuned (> 1: ours faster),
which a machine whose speed drifts between rounds (shared hosts) moves least.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def tflite_median(it, runs):
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        it.invoke()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def ours_median(cli, dnn, runs, threads, inputs):
    cmd = [cli, "run", dnn, "--repeat", str(runs), "--threads", str(threads), "--top", "0"]
    for name, f in inputs.items():
        cmd += ["--input", f"{name}={f}"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"median ([0-9.]+) ms", r.stdout)
    if not m:
        raise RuntimeError(f"no median in: {r.stdout[-300:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--schemas", default=None, help="tune --schemas (default: the CLI's)")
    ap.add_argument("--work", default=None, help="keep the .dnn files here (default: a temporary folder)")
    a = ap.parse_args()
    from ai_edge_litert.interpreter import Interpreter
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        for path in a.models:
            name = os.path.splitext(os.path.basename(path))[0]
            dnn, tuned = os.path.join(work, name + ".dnn"), os.path.join(work, name + ".tuned.dnn")
            subprocess.run([a.cli, "import", path, "-o", dnn], check=True, capture_output=True)
            t0 = time.time()
            cmd = [a.cli, "tune", dnn, "-o", tuned, "--threads", str(a.threads), "--report", os.path.join(work, name + ".tune.txt")]
            if a.schemas:
                cmd += ["--schemas", a.schemas]
            subprocess.run(cmd, check=True, capture_output=True)
            tune_s = time.time() - t0
            it = Interpreter(model_path=path, num_threads=a.threads)
            it.allocate_tensors()
            rng = np.random.default_rng(0)
            inputs = {}
            for k, d in enumerate(it.get_input_details()):
                x = rng.uniform(0, 1, size=tuple(d["shape"])).astype(d["dtype"])
                it.set_tensor(d["index"], x)
                inputs[d["name"]] = os.path.join(work, f"{name}.x{k}.npy")
                np.save(inputs[d["name"]], x)
            it.invoke()
            times = {"tflite": [], "untuned": [], "tuned": []}
            for _ in range(a.rounds):
                times["tflite"].append(tflite_median(it, a.runs))
                times["untuned"].append(ours_median(a.cli, dnn, a.runs, a.threads, inputs))
                times["tuned"].append(ours_median(a.cli, tuned, a.runs, a.threads, inputs))
            med = {k: statistics.median(v) for k, v in times.items()}
            med["ratio"] = statistics.median(t / o for t, o in zip(times["tflite"], times["tuned"]))
            rows.append((name, med, tune_s))
            print(f"{name}: TFLite {med['tflite']:.3f} ms, ours untuned {med['untuned']:.3f}, tuned {med['tuned']:.3f} "
                  f"(tuning {tune_s:.0f} s); TFLite / tuned = {med['ratio']:.2f} (rounds: "
                  + " ".join(f"{t / o:.2f}" for t, o in zip(times["tflite"], times["tuned"])) + ")", flush=True)
    print()
    print(f"| model | TFLite (XNNPACK) | ours untuned | ours tuned | TFLite / ours tuned |")
    print("| --- | --- | --- | --- | --- |")
    for name, med, _ in rows:
        print(f"| {name} | {med['tflite']:.3f} | {med['untuned']:.3f} | {med['tuned']:.3f} | {med['ratio']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
