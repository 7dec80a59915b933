#!/usr/bin/env python3
"""Is a tuned model faster than the untuned one, as a user runs it?

For the bundled demo, the zoo (bench/models/zoo) and the real trained models that import
(shared/real-models), tunes each model float32-only and hybrid (float32 + qint8), each twice
with a cold profile cache:
  quiet   on the machine as it is;
  loaded  while one busy-looping process per CPU runs beside the tuner (as right after a build),
then, right after each tuning and with the machine quiet again, times the untuned and the tuned
file in separate fresh `softneuro run` processes, interleaved round by round (the order alternated).
Timing each tuned file next to its own tuning keeps prediction and measurement minutes apart at
most: these VMs change speed state within minutes (the same file 0.38 ms in one block of rounds,
0.55 ms in the next), which across a model's four tunings made identical files differ by 40%.

Pass per tuned file: the median over the rounds of tuned/untuned (each round's two processes run
back to back, so the ratio sees one machine state: consecutive processes of one file differ by up
to 10% on these VMs) is at most 1.03, and DPRS's prediction is within 15% of the tuned file's
fresh-process median.

    bench/tuned_vs_untuned.py [--models demo,mobilenet_v2,...] [--rounds 9] [--repeat N]
                              [--variants float32,hybrid] [--conditions quiet,loaded]

Needs a Release build in build/ (the `softneuro` CLI), the zoo (bench/models/export_zoo.py) and
the real models (shared/real-models/fetch.sh); missing ones are skipped with a note.
Standard library only. Writes bench/results/tuned_vs_untuned.{md,json}.
"""
import argparse, contextlib, json, os, platform, re, shutil, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build", "softneuro")
ZOO = os.path.join(ROOT, "bench", "models", "zoo")
REAL = os.environ.get("SOFTNEURO_REAL_MODELS", os.path.expanduser("~/.cache/softneuro/real-models"))
# Real models: file, input shape for import (their spatial dims are symbolic).
REAL_MODELS = {
    "ppocr_rec": ("ch_PP-OCRv4_rec_infer.onnx", "x=1x3x48x320"),
    "ppocr_cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "x=1x3x48x192"),
    "ppocr_det": ("ch_PP-OCRv4_det_infer.onnx", "x=1x3x640x640"),
    "yolov8n": ("320n.onnx", "images=1x3x320x320"),
}
ZOO_MODELS = ["mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "resnet50", "vgg16"]
VARIANTS = {"float32": "cpu:float32:*", "hybrid": "cpu:float32:*,cpu:qint8:*"}


def sh(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def run_median(dnn, repeat, threads):
    out = sh([CLI, "run", dnn, "--repeat", str(repeat), "--top", "0", "--threads", str(threads)]).stdout
    return float(re.search(r"median ([0-9.]+) ms", out).group(1))


def time_pair(untuned, tuned, rounds, repeat, threads):
    """[untuned medians, tuned medians], one fresh process each per round, the order alternated."""
    files, samples = [untuned, tuned], [[], []]
    for r in range(rounds):
        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
            samples[k].append(run_median(files[k], repeat, threads))
    return samples


class Load:
    """One busy-looping process per CPU, for the duration of a `with` block."""

    def __enter__(self):
        self.procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(os.cpu_count() or 1)]
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        time.sleep(2.0)  # let the machine settle before anything is timed


def prepare_models(names, work):
    """name -> untuned .dnn path (imported where needed); skipped names with the reason."""
    models, skipped = {}, {}
    for name in names:
        out = os.path.join(work, name + ".dnn")
        if name == "demo":
            src = os.path.join(ROOT, "build", "models", "demo.dnn")
            if not os.path.exists(src):
                skipped[name] = "build/models/demo.dnn missing (build first)"
                continue
            shutil.copyfile(src, out)
        elif name in REAL_MODELS:
            onnx, shape = REAL_MODELS[name]
            path = os.path.join(REAL, onnx)
            if not os.path.exists(path):
                skipped[name] = f"{path} missing (shared/real-models/fetch.sh)"
                continue
            r = subprocess.run([CLI, "import", path, "-o", out, "--input-shape", shape], capture_output=True, text=True)
            if r.returncode != 0:
                skipped[name] = "does not import: " + (r.stderr.strip().splitlines() or ["?"])[-1][:300]
                continue
        else:
            path = os.path.join(ZOO, name + ".onnx")
            if not os.path.exists(path):
                skipped[name] = f"{path} missing (bench/models/export_zoo.py)"
                continue
            sh([CLI, "import", path, "-o", out])
        models[name] = out
    return models, skipped


def tune(dnn, out, schemas, threads, work, tag):
    cache = os.path.join(work, "cache-" + tag)
    shutil.rmtree(cache, ignore_errors=True)
    js = out + ".json"
    t0 = time.time()
    r = sh([CLI, "tune", dnn, "-o", out, "--schemas", schemas, "--cache", cache, "--threads", str(threads),
            "--report", out + ".txt", "--json", js])
    report = json.load(open(js))
    report["wall_s"] = time.time() - t0
    report["warnings"] = [l for l in r.stderr.splitlines() if "warning" in l]
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="demo," + ",".join(ZOO_MODELS) + "," + ",".join(REAL_MODELS))
    ap.add_argument("--variants", default="float32,hybrid")
    ap.add_argument("--conditions", default="quiet,loaded")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--repeat", type=int, default=0,
                    help="runs per fresh process (after one warm-up); default: enough for about 0.3 s of the untuned "
                         "model, 20 to 1000 (20 runs of a 0.25 ms model left 10%% noise between identical files)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "tuned_vs_untuned"))
    ap.add_argument("--cli", default=CLI)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "tuned_vs_untuned"))
    a = ap.parse_args()
    globals()["CLI"] = os.path.abspath(a.cli)
    os.makedirs(a.work, exist_ok=True)
    models, skipped = prepare_models(a.models.split(","), a.work)
    for n, why in skipped.items():
        print(f"{n}: skipped, {why}", flush=True)

    results = {}
    for name, dnn in models.items():
        repeat = a.repeat or max(20, min(1000, int(300 / max(0.01, run_median(dnn, 20, a.threads)))))
        rows = {}
        for variant in a.variants.split(","):
            for cond in a.conditions.split(","):
                tag = f"{name}.{variant}.{cond}"
                out = os.path.join(a.work, tag + ".dnn")
                print(f"tuning {tag} ...", flush=True)
                try:
                    with Load() if cond == "loaded" else contextlib.nullcontext():
                        rep = tune(dnn, out, VARIANTS[variant], a.threads, a.work, tag)
                    if cond != "loaded":
                        time.sleep(2.0)  # as Load settles on its way out
                except RuntimeError as e:  # a failed tuning is a failed row, not a lost run
                    rows[tag] = {"failed": str(e).strip().splitlines()[-1][:300]}
                    print(f"  {tag:<36} TUNING FAILED: {rows[tag]['failed']}", flush=True)
                    continue
                samples = time_pair(dnn, out, a.rounds, repeat, a.threads)
                untuned, med = statistics.median(samples[0]), statistics.median(samples[1])
                ratio = statistics.median(t / u for t, u in zip(samples[1], samples[0]))
                pred = rep["predicted_ms"]
                rows[tag] = {
                    "median_ms": med, "rounds_ms": samples[1], "untuned_ms": untuned, "untuned_rounds_ms": samples[0],
                    "repeat": repeat, "ratio": ratio,
                    "predicted_ms": pred, "prediction_error": pred / med - 1, "tuner_measured_ms": rep["measured_ms"],
                    "tuner_default_ms": rep.get("default_ms", 0), "kept_default": rep.get("kept_default", False),
                    "others_cpus": rep.get("others_cpus", -1), "tuning_s": rep["tuning_s"],
                    "openmp_wait": rep.get("openmp_wait", ""),
                    "pass_speed": ratio <= 1.03, "pass_prediction": abs(pred / med - 1) <= 0.15,
                }
                v = rows[tag]
                print(f"  {tag:<36} {med:8.3f} ms  x{v['ratio']:.3f} of untuned {untuned:.3f}  predicted {pred:.3f} "
                      f"({100 * v['prediction_error']:+.0f}%)  {'default kept' if v['kept_default'] else ''}"
                      f"{'' if v['pass_speed'] else '  SLOWER'}{'' if v['pass_prediction'] else '  PREDICTION OFF'}",
                      flush=True)
        results[name] = rows

    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu_name(), "threads": a.threads, "rounds": a.rounds,
            "repeat": a.repeat, "max_cpu_isa": os.environ.get("SOFTNEURO_MAX_CPU_ISA", ""),
            "cli_version": sh([CLI, "--version"]).stdout.strip(), "skipped": skipped}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    lines = [f"# Tuned vs untuned, fresh `softneuro run` processes ({meta['date']})", "",
             f"{meta['cpu']}, {a.threads} threads{', SOFTNEURO_MAX_CPU_ISA=' + meta['max_cpu_isa'] if meta['max_cpu_isa'] else ''}; "
             f"after each tuning, {a.rounds} interleaved rounds of `softneuro run --repeat N` of the untuned "
             f"and the tuned file (N: {a.repeat or 'about 0.3 s of runs'}): medians, the ratio the median of the "
             "rounds' tuned/untuned; 'in tuner': the untuned default's time in "
             "the tuner's final runs. Command: `bench/tuned_vs_untuned.py`.", "",
             "| model | tuned | tuned under | median ms | untuned ms | ratio | predicted ms | prediction | default in tuner ms | default kept | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    fails = 0
    for name, rows in results.items():
        for k, v in rows.items():
            _, variant, cond = k.rsplit(".", 2)
            if "failed" in v:
                fails += 1
                lines.append(f"| {name} | {variant} | {cond} | | | | | | | | TUNING FAILED: {v['failed']} |")
                continue
            ok = v["pass_speed"] and v["pass_prediction"]
            fails += not ok
            lines.append(f"| {name} | {variant} | {cond} (others {v['others_cpus']:.1f} CPUs) | {v['median_ms']:.3f} | "
                         f"{v['untuned_ms']:.3f} | {v['ratio']:.3f} | {v['predicted_ms']:.3f} | "
                         f"{100 * v['prediction_error']:+.0f}% | {v['tuner_default_ms']:.3f} | {'yes' if v['kept_default'] else 'no'} | "
                         f"{'ok' if ok else ('SLOWER' if not v['pass_speed'] else 'PREDICTION OFF')} |")
    if skipped:
        lines += ["", "Skipped: " + "; ".join(f"{n}: {why}" for n, why in skipped.items())]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\n{fails} of {sum(len(r) for r in results.values())} tuned files missed a goal; wrote {a.out}.md/.json")
    return 1 if fails else 0


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
