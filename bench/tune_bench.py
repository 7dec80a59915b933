#!/usr/bin/env python3
"""SoftNeuro's Tables I and IV for our zoo: end-to-end latency of the untuned
default, float32-only tuned, qint8-only tuned and hybrid-tuned nets, and the
tuning time of each (cold profile cache, then warm).

    bench/tune_bench.py [--models resnet50,mobilenet_v2] [--threads 2] [--rounds 3] [--repeat 10]

Needs: a Release build in build/ (softneuro CLI with `import`), the zoo in
bench/models/zoo (bench/models/export_zoo.py). Standard library only.
Writes bench/results/tuning.md and bench/results/tuning.json.
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile, time, platform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build", "softneuro")
ZOO = os.path.join(ROOT, "bench", "models", "zoo")
VARIANTS = {  # name -> --schemas (None: untuned)
    "untuned": None,
    "float32": "cpu:float32:*",
    "qint8": "cpu:qint8:*",
    "hybrid": "cpu:float32:*,cpu:qint8:*",
}


def sh(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout


def median_latency(dnn, threads, repeat):
    out = sh([CLI, "run", dnn, "--repeat", str(repeat), "--threads", str(threads), "--top", "0"])
    return float(re.search(r"median ([0-9.]+) ms", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "tune_bench"))
    ap.add_argument("--cli", default=CLI, help="the softneuro program (default build/softneuro)")
    a = ap.parse_args()
    globals()["CLI"] = a.cli
    models = a.models.split(",") if a.models else sorted(f[:-5] for f in os.listdir(ZOO) if f.endswith(".onnx"))
    os.makedirs(a.work, exist_ok=True)
    results = {}
    for m in models:
        base = os.path.join(a.work, m + ".dnn")
        sh([CLI, "import", os.path.join(ZOO, m + ".onnx"), "-o", base])
        files, tuning = {"untuned": base}, {}
        for v, schemas in VARIANTS.items():
            if schemas is None:
                continue
            cache = os.path.join(a.work, f"cache-{m}-{v}")
            shutil.rmtree(cache, ignore_errors=True)
            out = os.path.join(a.work, f"{m}.{v}.dnn")
            times = []
            for _ in ("cold", "warm"):
                t0 = time.monotonic()
                sh([CLI, "tune", base, "-o", out, "--schemas", schemas, "--cache", cache, "--threads", str(a.threads),
                    "--json", out + ".json"])
                times.append(time.monotonic() - t0)
            report = json.load(open(out + ".json"))
            tuning[v] = {"cold_s": times[0], "warm_s": times[1], "predicted_ms": report["predicted_ms"],
                         "measured_ms": report["measured_ms"], "adapts": len(report["adapts"])}
            files[v] = out
        # Interleave the contenders: rounds of each, median of the round medians.
        lat = {v: [] for v in files}
        for _ in range(a.rounds):
            for v, f in files.items():
                lat[v].append(median_latency(f, a.threads, a.repeat))
        results[m] = {"latency_ms": {v: statistics.median(x) for v, x in lat.items()}, "tuning": tuning}
        print(m, json.dumps(results[m]), flush=True)

    cpu = platform.processor() or "cpu"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except Exception:
        pass
    stamp = time.strftime("%Y-%m-%d")
    md = [f"# Tuning results ({stamp}, {cpu}, {a.threads} threads)", "",
          "Command: `" + " ".join(["bench/tune_bench.py"] + sys.argv[1:]) + "`", "",
          "## End-to-end latency, median ms (SoftNeuro Table I)", "",
          "| model | untuned | float32 tuned | qint8 tuned | hybrid tuned | hybrid ≤ best single? | tuned ≤ untuned? |", "|---|---|---|---|---|---|---|"]
    for m, r in results.items():
        l = r["latency_ms"]
        ok = l["hybrid"] <= min(l["float32"], l["qint8"]) * 1.03
        slower = [v for v in ("float32", "qint8", "hybrid") if l[v] > l["untuned"] * 1.03]
        md.append(f"| {m} | {l['untuned']:.2f} | {l['float32']:.2f} | {l['qint8']:.2f} | {l['hybrid']:.2f} | {'yes' if ok else 'NO'} | "
                  f"{'yes' if not slower else 'NO: ' + ', '.join(slower)} |")
    md += ["", "## Tuning time, s (SoftNeuro Table IV) and DPRS prediction", "",
           "Predicted: DPRS's total for the path it chose; measured: the tuner's own end-to-end median; "
           "error: predicted vs the benchmark's median latency of that file (Table I), goal within 15%. "
           "Goals: ResNet50 hybrid ≤ 60 s cold and ≤ 5 s warm, VGG16 hybrid ≤ 120 s cold.", "",
           "| model | variant | cold s | warm s | predicted ms | measured ms | error vs Table I | adapts |",
           "|---|---|---|---|---|---|---|---|"]
    for m, r in results.items():
        for v, t in r["tuning"].items():
            err = t['predicted_ms'] / r["latency_ms"][v] - 1
            md.append(f"| {m} | {v} | {t['cold_s']:.1f} | {t['warm_s']:.1f} | {t['predicted_ms']:.2f} | {t['measured_ms']:.2f} | "
                      f"{err * 100:+.0f}%{'' if abs(err) <= 0.15 else ' (over 15%)'} | {t['adapts']} |")
    md += ["", f"Load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)."]
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    open(os.path.join(ROOT, "bench", "results", "tuning.md"), "w").write("\n".join(md) + "\n")
    json.dump({"date": stamp, "cpu": cpu, "threads": a.threads, "results": results},
              open(os.path.join(ROOT, "bench", "results", "tuning.json"), "w"), indent=2)
    print("\n".join(md))


if __name__ == "__main__":
    main()
