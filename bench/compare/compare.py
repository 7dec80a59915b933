#!/usr/bin/env python3
"""Peer benchmark (issue 7): softneuro against ONNX Runtime, PyTorch and
TensorFlow Lite on the model zoo, batch 1, the same thread count for all.

Run it through bench/compare/run.sh, which sets up the environments first:

    bench/compare/run.sh [--models resnet50,mobilenet_v2|all] [--threads T] [--runs 20] [--rounds 5]
                         [--skip CONTENDER|GROUP ...] [--quick]

Contenders (groups in brackets):
  [softneuro] sn_untuned sn_float32 sn_qint8 sn_hybrid   (`softneuro run --repeat K`: its in-process timing)
  [ort]       ort_fp32 (all graph optimisations)  ort_int8 (quantize_static, QDQ)
  [torch]     torch_eager  torch_jit (trace + freeze)  torch_int8 (PTQ static, torchvision quantisable models)
  [tflite]    tflite_fp32  tflite_int8 (onnx2tf + TFLiteConverter, in bench/compare/.venv-tflite)

Every Python peer runs in a worker process of its own (bench/compare/worker.py)
and times itself in process (time.perf_counter around one inference). The
contenders are interleaved: R rounds, in each round every contender (in an
order rotated by one per round) does 1 warm-up run and K = ceil(runs / R)
timed runs. A figure is the median of the R round medians; min and max are
over all runs. Every int8 contender is calibrated on the same 8 seeded batches
softneuro's calibration uses by default (bench/compare/calib.py). Each
contender's output for the zoo's input is compared with PyTorch's float32
output (bench/models/zoo/NAME.output.npy).

Writes bench/results/compare.md, compare.json and compare.svg; work files go
to build/compare/.
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import select
import shutil
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import numpy as np
except ImportError:  # started with an interpreter other than bench/.venv's: switch to that one
    _venv_py = os.path.join(ROOT, "bench", ".venv", "bin", "python")
    if os.path.exists(_venv_py) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(ROOT, "bench", ".venv")):
        os.execv(_venv_py, [_venv_py, os.path.abspath(__file__)] + sys.argv[1:])
    raise

import calib  # noqa: E402

ZOO_ALL = ["resnet50", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "vgg16"]  # VGG16 last: slowest
ZOO_DEFAULT = ["resnet50", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small"]
SYS_PY = "/usr/bin/python3"
TFLITE_VENV = os.path.join(HERE, ".venv-tflite")
# ONNX Runtime and PyTorch workers: bench/.venv (onnxruntime from pip + Debian's torch)
VENV_PY = os.path.join(ROOT, "bench", ".venv", "bin", "python")

# id, group, label, schemas (softneuro only)
CONTENDERS = [
    ("sn_untuned", "softneuro", "SoftNeuro untuned", None),
    ("sn_float32", "softneuro", "SoftNeuro float32-tuned", "cpu:float32:*"),
    ("sn_qint8", "softneuro", "SoftNeuro qint8-tuned", "cpu:qint8:*"),
    ("sn_hybrid", "softneuro", "SoftNeuro hybrid-tuned", "cpu:float32:*,cpu:qint8:*"),
    ("ort_fp32", "ort", "ONNX Runtime fp32", None),
    ("ort_int8", "ort", "ONNX Runtime int8 (QDQ)", None),
    ("torch_eager", "torch", "PyTorch fp32 eager", None),
    ("torch_jit", "torch", "PyTorch fp32 TorchScript", None),
    ("torch_int8", "torch", "PyTorch int8", None),
    ("tflite_fp32", "tflite", "TFLite fp32", None),
    ("tflite_int8", "tflite", "TFLite int8", None),
]
LABEL = {c[0]: c[2] for c in CONTENDERS}
GROUP = {c[0]: c[1] for c in CONTENDERS}
SCHEMAS = {c[0]: c[3] for c in CONTENDERS if c[3]}
SHORT = {"sn_untuned": "SN untuned", "sn_float32": "SN fp32", "sn_qint8": "SN qint8", "sn_hybrid": "SN hybrid",
         "ort_fp32": "ORT fp32", "ort_int8": "ORT int8", "torch_eager": "PT eager", "torch_jit": "PT TorchScript",
         "torch_int8": "PT int8", "tflite_fp32": "TFLite fp32", "tflite_int8": "TFLite int8"}
FLAGS_OF_INTEREST = ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                     "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp"]


def log(*a):
    print(*a, flush=True)


def reason_of(text, limit=400):
    """The most telling line of a failing command's output: an error line if any,
    else the last non-empty line."""
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    if not lines:
        return "no output"
    for l in reversed(lines):
        if re.search(r"(error|Error|Exception|failed|FAILED)", l) and not l.startswith("File "):
            return l[:limit]
    return lines[-1][:limit]


def machine_info():
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for l in open("/proc/cpuinfo"):
            if l.startswith("model name"):
                cpu = l.split(":", 1)[1].strip()
            elif l.startswith(("flags", "Features")) and not flags:
                flags = set(l.split(":", 1)[1].split())
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    mem = ""
    try:
        kb = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")))
        mem = f"{kb / 2**20:.0f} GiB"
    except Exception:
        pass
    return {"cpu": cpu, "cores": cores, "arch": platform.machine(), "memory": mem,
            "flags": [f for f in FLAGS_OF_INTEREST if f in flags], "host": socket.gethostname(),
            "kernel": platform.release(), "loadavg_start": list(os.getloadavg())}


def snapshot_cli(cli, dst):
    """Copies the CLI and the shared libraries beside it (libsoftneuro*.so*) to
    dst, so that a colleague relinking the build folder mid-run cannot break the
    benchmark; LD_LIBRARY_PATH (which wins over the binary's RUNPATH) points there."""
    src = os.path.dirname(os.path.abspath(cli))
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    shutil.copy2(cli, os.path.join(dst, "softneuro"))
    for f in sorted(os.listdir(src)):
        if f.startswith("libsoftneuro") and ".so" in f:
            p = os.path.join(src, f)
            if os.path.islink(p):
                os.symlink(os.readlink(p), os.path.join(dst, f))
            else:
                shutil.copy2(p, os.path.join(dst, f))
    os.environ["LD_LIBRARY_PATH"] = dst + (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else "")
    return os.path.join(dst, "softneuro")


def git_describe():
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+local changes" if dirty else "")
    except Exception:
        return "?"


# ------------------------------------------------------------------ contenders

class Failed(Exception):
    pass


class Unavailable(Failed):
    """A contender that cannot be set up here (reported as skipped)."""


class CliContender:
    """softneuro: `softneuro run FILE --repeat K` per round; the CLI times the
    runs in process (one warm-up run first) and prints median, min and max."""

    def __init__(self, cid, cli, dnn, x_path, out_path, threads):
        self.cid, self.cli, self.dnn, self.x, self.out, self.threads = cid, cli, dnn, x_path, out_path, threads
        self.info = {}

    def start(self):
        pass

    def bench(self, k, timeout):
        args = [self.cli, "run", self.dnn, "--input", "input=" + self.x, "--output", "output=" + self.out,
                "--repeat", str(k), "--threads", str(self.threads), "--top", "0"]
        try:
            r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failed(f"softneuro run took more than {timeout} s")
        except OSError as e:
            raise Failed(f"cannot start {self.cli}: {e}")
        if r.returncode != 0:
            raise Failed(f"softneuro run exit {r.returncode}: " + reason_of(r.stderr + "\n" + r.stdout))
        m = re.search(r"latency over (\d+) runs \((\d+) threads\): median ([0-9.]+) ms, min ([0-9.]+) ms, max ([0-9.]+) ms",
                      r.stdout)
        if not m:
            raise Failed("no latency line in softneuro run's output: " + reason_of(r.stdout))
        if int(m.group(2)) != self.threads:
            self.info["threads_reported"] = int(m.group(2))
        return {"median": float(m.group(3)), "min": float(m.group(4)), "max": float(m.group(5)), "n": int(m.group(1))}

    def stop(self):
        pass


class WorkerContender:
    """A Python peer in its own process (worker.py serve KIND)."""

    def __init__(self, cid, python, model, zoo, work, threads, log_path, ready_timeout):
        self.cid, self.python, self.model, self.zoo, self.work = cid, python, model, zoo, work
        self.threads, self.log_path, self.ready_timeout = threads, log_path, ready_timeout
        self.proc, self.buf, self.info = None, b"", {}

    def _fail(self, what):
        tail = ""
        try:
            tail = open(self.log_path, errors="replace").read()[-20000:]
        except OSError:
            pass
        self.stop()
        raise Failed(what + (": " + reason_of(tail) if tail.strip() else ""))

    def _recv(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(f"no answer from the worker within {timeout:.0f} s")
            r, _, _ = select.select([self.proc.stdout], [], [], min(left, 5))
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    self.proc.wait()
                    self._fail(f"worker exited (status {self.proc.returncode})")
                self.buf += chunk
            elif self.proc.poll() is not None:
                self._fail(f"worker exited (status {self.proc.returncode})")
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def start(self):
        env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
        self.logf = open(self.log_path, "w")
        self.proc = subprocess.Popen([self.python, os.path.join(HERE, "worker.py"), "serve", self.cid,
                                      "--model", self.model, "--zoo", self.zoo, "--work", self.work,
                                      "--threads", str(self.threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.logf, env=env)
        msg = self._recv(self.ready_timeout)
        if not msg.get("ready"):
            self._fail(f"worker did not start: {msg}")
        self.info = msg.get("info", {})

    def bench(self, k, timeout):
        try:
            self.proc.stdin.write((json.dumps({"cmd": "bench", "runs": k, "warmup": 1}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._fail("worker is gone")
        msg = self._recv(timeout)
        if "times_ms" not in msg:
            self._fail(f"worker answered {msg}")
        t = msg["times_ms"]
        return {"median": statistics.median(t), "min": min(t), "max": max(t), "n": len(t), "times_ms": t}

    def stop(self):
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            if p.poll() is None:
                p.stdin.write(b'{"cmd": "quit"}\n')
                p.stdin.flush()
                p.wait(timeout=30)
        except Exception:
            pass
        if p.poll() is None:
            p.kill()
            p.wait()
        try:
            self.logf.close()
        except Exception:
            pass


# ------------------------------------------------------------------ preparation

def sh(args, timeout=None, **kw):
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    except OSError as e:
        raise Failed(f"cannot start {args[0]}: {e}")
    if r.returncode != 0:
        raise Failed(f"{os.path.basename(args[0])} {args[1] if len(args) > 1 else ''} exit {r.returncode}: "
                     + reason_of(r.stderr + "\n" + r.stdout))
    return r.stdout


def fresh(path, *sources):
    """path exists and is newer than every source."""
    if not os.path.exists(path):
        return False
    t = os.path.getmtime(path)
    return all(os.path.getmtime(s) <= t for s in sources if os.path.exists(s))


def prepare_softneuro(a, m, onnx, work, wanted, res):
    """Imports and tunes; returns {cid: dnn path}. Records tuning times (cold
    profile cache, then warm) in res['tuning'][variant]."""
    files = {}
    base = os.path.join(work, "untuned.dnn")
    t0 = time.monotonic()
    if not (a.reuse_tuned and fresh(base, onnx)):
        try:
            out = sh([a.cli, "import", onnx, "-o", base], timeout=1800)
        except (Failed, subprocess.TimeoutExpired) as e:
            for cid in wanted:
                res["contenders"][cid] = {"status": "failed", "reason": f"import: {e}"}
            return files
        mt = re.search(r"in ([0-9.]+) ms", out)
        res["import_s"] = float(mt.group(1)) / 1000 if mt else time.monotonic() - t0
    if "sn_untuned" in wanted:
        files["sn_untuned"] = base
    prev = {}
    prev_path = os.path.join(work, "tuning.json")
    if a.reuse_tuned and os.path.exists(prev_path):
        prev = json.load(open(prev_path))
    for cid in [c for c in wanted if c in SCHEMAS]:
        out_dnn = os.path.join(work, cid[3:] + ".dnn")
        if a.reuse_tuned and cid in prev and fresh(out_dnn, base):
            res["tuning"][cid] = dict(prev[cid], reused=True)
            files[cid] = out_dnn
            log(f"  {cid}: reusing {out_dnn} (--reuse-tuned)")
            continue
        cache = os.path.join(work, "cache-" + cid[3:])
        shutil.rmtree(cache, ignore_errors=True)
        times, cold_report, warm_error = [], None, None
        for phase in ("cold", "warm"):
            # The cold run's file is the one benchmarked (what a first tuning gives);
            # the warm run only measures tuning time with a filled profile cache.
            sfx = "" if phase == "cold" else ".warm"
            rep = os.path.join(work, cid[3:] + sfx + ".tune.json")
            if os.path.exists(rep):
                os.remove(rep)
            t0 = time.monotonic()
            try:
                sh([a.cli, "tune", base, "-o", os.path.join(work, cid[3:] + sfx + ".dnn"), "--schemas", SCHEMAS[cid],
                    "--cache", cache, "--threads", str(a.threads), "--json", rep,
                    "--report", os.path.join(work, cid[3:] + sfx + ".tune.txt")] + a.tune_args, timeout=a.tune_timeout)
            except subprocess.TimeoutExpired:
                err = f"tune ({phase} cache) took more than {a.tune_timeout} s"
            except Failed as e:
                err = f"tune ({phase} cache): {e}"
            else:
                times.append(time.monotonic() - t0)
                r = json.load(open(rep))
                cold_report = cold_report or r
                log(f"  {cid}: tuned ({phase} cache) in {times[-1]:.1f} s, predicted {r.get('predicted_ms', 0):.3f} ms, "
                    f"measured {r.get('measured_ms', 0):.3f} ms")
                continue
            log(f"  {cid}: {err}")
            if phase == "cold":
                res["contenders"][cid] = {"status": "failed", "reason": err}
            else:
                warm_error = err
            break
        if not times:
            continue
        w = r if len(times) > 1 else {}

        def path_of(rr):
            return ([(l.get("layer"), l.get("descriptor"), l.get("routine_params")) for l in rr.get("layers", [])],
                    [(x.get("blob"), x.get("consumer"), x.get("descriptor")) for x in rr.get("adapts", [])])
        c = cold_report
        res["tuning"][cid] = {"cold_s": times[0], "warm_s": times[1] if len(times) > 1 else None, "warm_error": warm_error,
                              "tuning_s_reported": [c.get("tuning_s"), w.get("tuning_s")],
                              "predicted_ms": c.get("predicted_ms"), "measured_ms": c.get("measured_ms"),
                              "warm_predicted_ms": w.get("predicted_ms"), "warm_measured_ms": w.get("measured_ms"),
                              "warm_same_path": path_of(c) == path_of(w) if w else None,
                              "measurements": [c.get("measurements"), w.get("measurements")],
                              "cache_hits": [c.get("cache_hits"), w.get("cache_hits")],
                              "adapts": len(c.get("adapts", [])), "layers": len(c.get("layers", [])),
                              "qint8_layers": sum(1 for l in c.get("layers", []) if ":qint8" in l.get("descriptor", ""))}
        files[cid] = out_dnn
    json.dump({k: v for k, v in res["tuning"].items()}, open(prev_path, "w"), indent=1)
    return files


def run_prepare(a, python, command, m, work, log_path, timeout, extra=()):
    """worker.py prepare-*; returns its JSON result or raises Failed."""
    args = [python, os.path.join(HERE, "worker.py"), command, "--model", m, "--zoo", a.zoo, "--work", work,
            "--calib", a.calib_dir, "--threads", str(a.threads), *extra]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise Failed(f"{command} took more than {timeout} s")
    open(log_path, "w").write(r.stdout + "\n--- stderr ---\n" + r.stderr)
    if r.returncode != 0:
        raise Failed(f"{command}: " + reason_of(r.stderr + "\n" + r.stdout))
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception:
        raise Failed(f"{command}: no result line ({reason_of(r.stdout)})")


def tflite_python():
    """The TFLite venv's interpreter, or raises Failed with why it is not there."""
    marker = TFLITE_VENV + ".failed"
    if os.path.exists(marker):
        raise Unavailable("TFLite setup failed earlier: " + open(marker).read().strip()[:300]
                     + f" (remove {os.path.relpath(marker, ROOT)} to let run.sh try again)")
    py = os.path.join(TFLITE_VENV, "bin", "python")
    if not os.path.exists(py):
        raise Unavailable(f"no {os.path.relpath(TFLITE_VENV, ROOT)} (bench/compare/run.sh installs it)")
    r = subprocess.run([py, "-c", "import tensorflow, onnx2tf"], capture_output=True, text=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if r.returncode != 0:
        raise Unavailable("TFLite venv broken: " + reason_of(r.stderr))
    return py


# ------------------------------------------------------------------ one model

def bench_model(a, m, contenders):
    onnx = os.path.join(a.zoo, m + ".onnx")
    x_path = os.path.join(a.zoo, m + ".input.npy")
    ref = np.load(os.path.join(a.zoo, m + ".output.npy"))
    work = os.path.join(a.work, m)
    logs = os.path.join(work, "logs")
    os.makedirs(logs, exist_ok=True)
    res = {"contenders": {}, "tuning": {}}
    C = res["contenders"]
    venv_py = VENV_PY if os.path.exists(VENV_PY) else sys.executable

    # --- preparation (one at a time; nothing else runs meanwhile)
    sn = [c for c in contenders if GROUP[c] == "softneuro"]
    files = {}
    if sn:
        if not os.path.exists(a.cli):
            for c in sn:
                C[c] = {"status": "failed", "reason": f"{a.cli} missing (build failed?)"}
        else:
            log(f"[{m}] softneuro: import and tune")
            files = prepare_softneuro(a, m, onnx, work, sn, res)

    if "ort_int8" in contenders:
        dst = os.path.join(work, "ort_int8.onnx")
        if not (a.reuse and fresh(dst, onnx, os.path.join(a.calib_dir, "how.txt"))):
            log(f"[{m}] ONNX Runtime: static QDQ quantisation")
            if os.path.exists(dst):
                os.remove(dst)
            try:
                res["ort_int8_prepare"] = run_prepare(a, venv_py, "prepare-ort-int8", m, work,
                                                      os.path.join(logs, "prepare-ort-int8.log"), 3600)
            except Failed as e:
                C["ort_int8"] = {"status": "failed", "reason": str(e)}

    torch_wanted = [c for c in contenders if GROUP[c] == "torch"]
    if torch_wanted:
        stamp = os.path.join(work, "torch_prepare.json")
        if not (a.reuse and fresh(stamp, onnx, os.path.join(a.calib_dir, "how.txt"))):
            log(f"[{m}] PyTorch: rebuild the zoo weights" + (", quantise" if "torch_int8" in torch_wanted else ""))
            for f in ("torch_int8.pt", "torch_int8.json", "torch_prepare.json"):
                if os.path.exists(os.path.join(work, f)):
                    os.remove(os.path.join(work, f))
            try:
                r = run_prepare(a, venv_py, "prepare-torch", m, work, os.path.join(logs, "prepare-torch.log"), 3600)
                json.dump(r, open(stamp, "w"))
            except Failed as e:
                for c in torch_wanted:
                    C[c] = {"status": "failed", "reason": str(e)}
        if os.path.exists(stamp):
            r = json.load(open(stamp))
            res["torch_prepare"] = r
            if "torch_int8" in torch_wanted and "torch_int8" not in C:
                if r.get("int8_skipped"):
                    C["torch_int8"] = {"status": "skipped", "reason": r["int8_skipped"]}
                elif r.get("int8_error"):
                    C["torch_int8"] = {"status": "failed", "reason": "quantisation: " + r["int8_error"]}

    tfl_wanted = [c for c in contenders if GROUP[c] == "tflite"]
    tfl_py = None
    if tfl_wanted:
        try:
            tfl_py = tflite_python()
            tdir = os.path.join(work, "tflite")
            if not (a.reuse and fresh(os.path.join(tdir, "fp32.tflite"), onnx)
                    and fresh(os.path.join(tdir, "int8.tflite"), onnx, os.path.join(a.calib_dir, "how.txt"))):
                log(f"[{m}] TFLite: onnx2tf conversion, int8 quantisation")
                for f in ("fp32.tflite", "int8.tflite"):
                    if os.path.exists(os.path.join(tdir, f)):
                        os.remove(os.path.join(tdir, f))
                r = run_prepare(a, tfl_py, "prepare-tflite", m, work, os.path.join(logs, "prepare-tflite.log"), 3600)
                json.dump(r, open(os.path.join(work, "tflite_prepare.json"), "w"))
            pj = os.path.join(work, "tflite_prepare.json")
            r = json.load(open(pj)) if os.path.exists(pj) else {}
            res["tflite_prepare"] = r
            if "tflite_int8" in tfl_wanted and not os.path.exists(os.path.join(tdir, "int8.tflite")):
                C["tflite_int8"] = {"status": "failed", "reason": "int8 conversion: " + "; ".join(r.get("int8_errors", ["?"]))}
        except Failed as e:
            for c in tfl_wanted:
                C[c] = {"status": "skipped" if isinstance(e, Unavailable) else "failed", "reason": str(e)}

    # --- a quieter machine, if asked for
    if a.wait_load is not None:
        t0 = time.monotonic()
        while os.getloadavg()[0] > a.wait_load and time.monotonic() - t0 < a.wait_max:
            time.sleep(15)
        res["waited_s"] = time.monotonic() - t0
        log(f"[{m}] waited {res['waited_s']:.0f} s for the load average ({os.getloadavg()[0]:.2f}, wanted <= {a.wait_load})")

    # --- start the contenders (load, reference output, warm-up)
    active = []
    for cid in contenders:
        if cid in C:
            continue
        if GROUP[cid] == "softneuro":
            if cid not in files:
                C.setdefault(cid, {"status": "failed", "reason": "not prepared"})
                continue
            obj = CliContender(cid, a.cli, files[cid], x_path, os.path.join(work, cid + ".output.npy"), a.threads)
        else:
            py = tfl_py if GROUP[cid] == "tflite" else venv_py
            obj = WorkerContender(cid, py, m, a.zoo, work, a.threads, os.path.join(logs, cid + ".log"), a.load_timeout)
        out = os.path.join(work, cid + ".output.npy")
        if os.path.exists(out):
            os.remove(out)
        try:
            log(f"[{m}] start {cid}")
            obj.start()
        except Exception as e:
            C[cid] = {"status": "failed", "reason": f"load: {e if isinstance(e, Failed) else repr(e)}"}
            obj.stop()
            continue
        C[cid] = {"status": "ok", "rounds": [], "info": obj.info}
        active.append(obj)

    # --- interleaved rounds
    k = a.per_round
    load0 = os.getloadavg()[0]
    try:
        for r in range(a.rounds):
            order = active[r % len(active):] + active[:r % len(active)] if active else []
            line = []
            for obj in order:
                if C[obj.cid]["status"] != "ok":
                    continue
                try:
                    st = obj.bench(k, a.bench_timeout)
                except Exception as e:
                    C[obj.cid].update(status="failed",
                                      reason=f"run (round {r + 1}): {e if isinstance(e, Failed) else repr(e)}")
                    obj.stop()
                    continue
                C[obj.cid]["rounds"].append(st)
                line.append(f"{obj.cid} {st['median']:.2f}")
            log(f"[{m}] round {r + 1}/{a.rounds}: " + ", ".join(line))
    finally:
        for obj in active:
            obj.stop()
    res["loadavg_rounds"] = [load0, os.getloadavg()[0]]

    # --- figures and output checks
    for cid, c in C.items():
        if c["status"] != "ok":
            continue
        rs = c["rounds"]
        c["median_ms"] = statistics.median(x["median"] for x in rs)
        c["min_ms"] = min(x["min"] for x in rs)
        c["max_ms"] = max(x["max"] for x in rs)
        c["runs"] = sum(x["n"] for x in rs)
        if all("times_ms" in x for x in rs):
            c["pooled_median_ms"] = statistics.median(t for x in rs for t in x["times_ms"])
        out = os.path.join(work, cid + ".output.npy")
        try:
            y = np.load(out).astype(np.float64)
            if y.shape != ref.shape:
                c["check"] = {"error": f"output shape {list(y.shape)}, reference {list(ref.shape)}"}
                continue
            d = float(np.abs(y - ref).max())
            top5 = set(np.argsort(-y.ravel())[:5].tolist())
            rtop5 = set(np.argsort(-ref.ravel())[:5].tolist())
            c["check"] = {"max_abs_diff": d, "rel_diff": d / float(np.abs(ref).max()),
                          "top1_agree": bool(int(np.argmax(y)) == int(np.argmax(ref))), "top5_overlap": len(top5 & rtop5),
                          "finite": bool(np.isfinite(y).all())}
        except Exception as e:
            c["check"] = {"error": f"{type(e).__name__}: {e}"}
    res["reference_max_abs"] = float(np.abs(ref).max())
    return res


# ------------------------------------------------------------------ reporting

# A float32 contender's outputs lie within ~1e-5 of PyTorch's (summation order, Winograd); one further off
# computes wrongly (a tuned MobileNetV2 read 0.37 here once, and the table said it quietly).
FLOAT32_REL_DIFF = 1e-3


def is_float32(cid):
    return cid in ("sn_untuned", "sn_float32", "torch_eager", "torch_jit") or "fp32" in cid


def fmt_ms(v):
    return f"{v:.3g}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def write_reports(a, meta, results, models, contenders):
    os.makedirs(a.results, exist_ok=True)
    notes, note_ids = [], {}

    def note(text):
        if text not in note_ids:
            notes.append(text)
            note_ids[text] = len(notes)
        return f"[{note_ids[text]}]"

    mi = meta["machine"]
    md = [f"# Peer comparison: batch 1, {a.threads} threads — {meta['date']}", "",
          f"**Machine:** {mi['cpu']}, {mi['cores']} cores ({mi['arch']}, {mi['memory']}), "
          f"flags: {' '.join(mi['flags']) or '-'}; load average at start {' '.join(f'{x:.2f}' for x in mi['loadavg_start'])}, "
          f"at end {' '.join(f'{x:.2f}' for x in meta['loadavg_end'])}  ",
          f"**Command:** `{meta['command']}`  ",
          f"**Versions:** {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}  ",
          f"**Environment:** {' '.join(f'{k}={v}' for k, v in meta['env'].items()) or 'no OMP_*/KMP_*/DNNL_*/SOFTNEURO_* variables set'}  ",
          f"**Method:** {a.rounds} interleaved round(s); per round each contender does 1 warm-up run and {a.per_round} "
          f"timed runs, in process, wall clock ({a.rounds * a.per_round} timed runs per figure). Figure = median of the "
          f"round medians (min–max over all runs), in ms. int8 contenders calibrated on {meta['calibration']}.", ""]
    busy = max(mi["loadavg_start"][0], meta["loadavg_end"][0])
    if busy > 0.75 * mi["cores"]:
        md += [f"**Warning: the machine was busy (1-minute load average up to {busy:.1f} on {mi['cores']} cores, "
               "other work included): multi-threaded figures, PyTorch's above all (OpenMP threads spin-waiting on a "
               "descheduled peer), can be inflated many times; ratios within a round are the meaningful part.**", ""]
    if a.quick:
        md += ["**--quick run: too few runs for conclusions (a smoke test).**", ""]
    md += ["## Latency, median ms (min–max) — SoftNeuro Table II layout", "",
           "| model | " + " | ".join(LABEL[c] for c in contenders) + " |",
           "|---|" + "---|" * len(contenders)]
    for m in models:
        row = []
        for cid in contenders:
            c = results[m]["contenders"].get(cid, {"status": "failed", "reason": "not run"})
            if c["status"] == "ok":
                row.append(f"{fmt_ms(c['median_ms'])} ({fmt_ms(c['min_ms'])}–{fmt_ms(c['max_ms'])})")
            else:
                row.append(f"{c['status']} {note(c.get('reason', '?'))}")
        md.append(f"| {m} | " + " | ".join(row) + " |")

    md += ["", "1-minute load average over the timed rounds (start→end): "
           + ", ".join(f"{m} {results[m]['loadavg_rounds'][0]:.1f}→{results[m]['loadavg_rounds'][1]:.1f}" for m in models
                       if "loadavg_rounds" in results[m]) + f" ({mi['cores']} cores)."]
    # ratios: peers' median / softneuro's best tuned and hybrid
    ours = [c for c in ("sn_hybrid", "sn_float32") if c in contenders]
    for our in ours:
        md += ["", f"## Speed-up of {LABEL[our]} over each contender (their median / ours; > 1: we are faster)", "",
               "| model | " + " | ".join(LABEL[c] for c in contenders if c != our) + " |",
               "|---|" + "---|" * (len(contenders) - 1)]
        for m in models:
            cs = results[m]["contenders"]
            o = cs.get(our, {})
            row = []
            for cid in contenders:
                if cid == our:
                    continue
                p = cs.get(cid, {})
                row.append(f"{p['median_ms'] / o['median_ms']:.2f}x" if o.get("status") == "ok" and p.get("status") == "ok" else "—")
            md.append(f"| {m} | " + " | ".join(row) + " |")

    md += ["", "## Output check against PyTorch's float32 output (zoo input)", "",
           "Cell: max abs diff / relative diff (max abs diff ÷ max |reference|), top-1 agreement (✓/✗), "
           f"top-5 overlap. A fast wrong answer shows here: **WRONG** marks a float32 contender more than "
           f"{FLOAT32_REL_DIFF:g} off.", "",
           "| model (max \\|ref\\|) | " + " | ".join(SHORT[c] for c in contenders) + " |",
           "|---|" + "---|" * len(contenders)]
    for m in models:
        row = []
        for cid in contenders:
            c = results[m]["contenders"].get(cid, {})
            ch = c.get("check")
            if c.get("status") != "ok" or not ch:
                row.append("—")
            elif "error" in ch:
                row.append("ERROR " + note(ch["error"]))
            else:
                wrong = is_float32(cid) and not ch["rel_diff"] <= FLOAT32_REL_DIFF
                if wrong:
                    log(f"[{m}] {cid}: WRONG OUTPUT, {ch['rel_diff']:.1e} of the reference's largest value "
                        f"(float32 computes within {FLOAT32_REL_DIFF:g})")
                row.append(("**WRONG** " if wrong else "") + f"{ch['max_abs_diff']:.1e} / {ch['rel_diff']:.1e} "
                           f"{'✓' if ch['top1_agree'] else '✗'} {ch['top5_overlap']}/5" + ("" if ch["finite"] else " NaN/inf"))
        md.append(f"| {m} ({results[m]['reference_max_abs']:.3g}) | " + " | ".join(row) + " |")

    tuned = [c for c in contenders if c in SCHEMAS]
    if tuned:
        md += ["", "## softneuro tuning time (SoftNeuro Table IV): wall clock of `softneuro tune`, s", "",
               "Cold: fresh profile cache folder (its output is the file benchmarked above); warm: the same command "
               "again with that cache (output kept apart). Predicted: DPRS's end-to-end estimate; measured: the tuner's "
               "own end-to-end measurement (ms), cold run, then warm run. Same path: whether the warm run chose the same "
               "routine path.", "",
               "| model | variant | schemas | cold s | warm s | predicted ms | measured ms | same path | qint8 layers / layers | adapts |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        for m in models:
            imp = results[m].get("import_s")
            for cid in tuned:
                t = results[m]["tuning"].get(cid)
                if not t:
                    c = results[m]["contenders"].get(cid, {})
                    md.append(f"| {m} | {cid[3:]} | `{SCHEMAS[cid]}` | {c.get('status', 'failed')} "
                              f"{note(c.get('reason', '?'))} | | | | | | |")
                    continue
                warm = f"{t['warm_s']:.1f}" if t.get("warm_s") is not None else \
                    ("failed " + note(t["warm_error"]) if t.get("warm_error") else "—")

                def two(x, y):
                    return f"{x:.2f}" + (f" / {y:.2f}" if y is not None else "")
                same = {True: "yes", False: "no", None: "—"}[t.get("warm_same_path")]
                md.append(f"| {m} | {cid[3:]} | `{SCHEMAS[cid]}` | {t['cold_s']:.1f}{' (reused)' if t.get('reused') else ''} | "
                          f"{warm} | {two(t['predicted_ms'], t.get('warm_predicted_ms'))} | "
                          f"{two(t['measured_ms'], t.get('warm_measured_ms'))} | {same} | "
                          f"{t.get('qint8_layers', '?')} / {t['layers']} | {t['adapts']} |")
            if imp is not None:
                md.append(f"| {m} | import | | {imp:.2f} | | | | | | |")

    if notes:
        md += ["", "## Failed and skipped contenders", ""]
        md += [f"{i}. {n}" for i, n in enumerate(notes, 1)]
    remarks = [f"- {m}, {LABEL[cid]}: {c['info']['note']}" for m in models for cid, c in results[m]["contenders"].items()
               if c.get("info", {}).get("note")]
    if remarks:
        md += ["", "## Remarks", ""] + remarks
    md += ["", "## Details", "",
           "- softneuro: `softneuro run X.dnn --repeat K --threads T` per round (the CLI's own in-process timing; "
           "process start-up and loading are outside it). Untuned = the imported net as is.",
           "- ONNX Runtime: CPU execution provider, ORT_ENABLE_ALL, intra-op threads T, sequential. int8: "
           "`quantize_static` (after `quant_pre_process`), QDQ, per-channel int8 weights, uint8 activations, MinMax.",
           "- PyTorch: weights rebuilt exactly as bench/models/export_zoo.py made them; eager under inference_mode; "
           "TorchScript = torch.jit.trace + torch.jit.freeze; int8 = eager-mode post-training static quantisation "
           "of torchvision's quantisable model (fuse_model, the engine's default qconfig), traced and frozen.",
           "- TFLite: onnx2tf (NHWC input), interpreter with num_threads=T (XNNPACK delegate by default); int8 = "
           "TFLiteConverter full-integer quantisation with the same calibration batches, float input/output.",
           "- Every Python contender runs in a process of its own; idle ones block on a pipe."]
    md_text = "\n".join(md) + "\n"
    open(os.path.join(a.results, "compare.md"), "w").write(md_text)
    json.dump({"meta": meta, "settings": {"threads": a.threads, "rounds": a.rounds, "per_round": a.per_round,
                                          "runs": a.rounds * a.per_round, "quick": a.quick, "contenders": contenders,
                                          "labels": {c: LABEL[c] for c in contenders}},
               "results": results}, open(os.path.join(a.results, "compare.json"), "w"), indent=1)
    try:
        draw_chart(a.results)
    except Exception as e:
        log(f"chart not written: {type(e).__name__}: {e}")
    return md_text


def plot(a, meta, results, models, contenders):
    """compare.svg: drawn by libsoftneuro's own chart code (softneuro.chart_svg,
    the frame and bars of `softneuro report --svg`)."""
    import softneuro
    colors = {"softneuro": "#d62728", "ort": "#1f77b4", "torch": "#ff7f0e", "tflite": "#2ca02c", "openvino": "#9467bd"}
    panels = []
    for m in models:
        bars = []
        for cid in contenders:
            c = results[m]["contenders"].get(cid, {})
            if c.get("status") == "ok":
                bars.append({"label": SHORT[cid], "median": c["median_ms"], "min": c["min_ms"], "max": c["max_ms"],
                             "colour": colors.get(GROUP[cid], "#7f7f7f"), "hatched": "int8" in cid})
            else:
                bars.append({"label": SHORT[cid], "note": c.get("status", "failed")})
        panels.append((m, bars))
    mi = meta["machine"]
    softneuro.chart_svg(f"Batch 1, {a.threads} threads: {mi['cpu']}, {mi['cores']} cores, {meta['date']}"
                        + (" (--quick)" if a.quick else ""), panels, path=os.path.join(a.results, "compare.svg"))


def chart_only(results_dir):
    """compare.svg from compare.json (no measurement)."""
    data = json.load(open(os.path.join(results_dir, "compare.json")))
    st = data["settings"]
    args = argparse.Namespace(threads=st["threads"], quick=st.get("quick", False), results=results_dir)
    plot(args, data["meta"], data["results"], list(data["results"]), st["contenders"])
    log(f"wrote {os.path.relpath(os.path.join(results_dir, 'compare.svg'), ROOT)} from compare.json")


def draw_chart(results_dir):
    """chart_only() here where the softneuro package imports, else under the
    interpreter of build/python-venv (scripts/main.sh installs it there)."""
    try:
        import softneuro  # noqa: F401
    except ImportError:
        py = os.path.join(ROOT, "build", "python-venv", "bin", "python")
        subprocess.run([py, os.path.abspath(__file__), "--chart-only", "--results", results_dir], check=True)
        return
    chart_only(results_dir)


# ------------------------------------------------------------------ main

def select_contenders(skip):
    ids = [c[0] for c in CONTENDERS]
    out = []
    for cid in ids:
        if any(s == cid or s == GROUP[cid] or (s.endswith("*") and cid.startswith(s[:-1])) for s in skip):
            continue
        out.append(cid)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(ZOO_DEFAULT),
                    help="comma-separated zoo models, or 'all' (the five, VGG16 included); default: %(default)s")
    try:
        ncores = len(os.sched_getaffinity(0))
    except AttributeError:
        ncores = os.cpu_count()
    ap.add_argument("--threads", type=int, default=ncores, help="threads for every contender (default: all cores, %(default)s)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per figure (default 20; --quick: 3)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; --quick: 1)")
    ap.add_argument("--skip", nargs="+", default=[], metavar="CONTENDER",
                    help="contenders or groups to leave out: " + " ".join(c[0] for c in CONTENDERS)
                    + "; groups softneuro ort torch tflite; a trailing * is a prefix")
    ap.add_argument("--quick", action="store_true", help="few runs, for smoke tests")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse converted peer models in build/compare (ORT int8, PyTorch, TFLite) when newer than the zoo")
    ap.add_argument("--reuse-tuned", action="store_true",
                    help="reuse softneuro's tuned files and tuning times from an earlier run (development only)")
    ap.add_argument("--tune-args", default="", help="extra arguments for `softneuro tune`, e.g. '--unit-budget-ms 10'")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "softneuro"))
    ap.add_argument("--zoo", default=os.path.join(ROOT, "bench", "models", "zoo"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "compare"))
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--omp-passive", action="store_true",
                    help="OMP_WAIT_POLICY=passive for every contender (OpenMP users: PyTorch, softneuro's oneDNN "
                         "routines); on a shared, busy machine spinning OpenMP barriers lose whole time slices")
    ap.add_argument("--wait-load", type=float, default=None, metavar="L",
                    help="before each model's timed rounds, wait until the 1-minute load average is <= L "
                         "(at most --wait-max seconds)")
    ap.add_argument("--wait-max", type=int, default=1800)
    ap.add_argument("--tune-timeout", type=int, default=3600)
    ap.add_argument("--bench-timeout", type=int, default=1200, help="seconds for one contender's round")
    ap.add_argument("--load-timeout", type=int, default=1800, help="seconds for a worker to load and warm up")
    ap.add_argument("--chart-only", action="store_true", help="draw compare.svg from compare.json, measure nothing")
    a = ap.parse_args()
    if a.chart_only:
        return chart_only(a.results)
    if a.omp_passive:
        os.environ["OMP_WAIT_POLICY"] = "passive"
    if a.runs is None:
        a.runs = 3 if a.quick else 20
    if a.rounds is None:
        a.rounds = 1 if a.quick else 5
    a.rounds = max(1, min(a.rounds, a.runs))
    a.per_round = math.ceil(a.runs / a.rounds)
    a.tune_args = a.tune_args.split()
    models = ZOO_ALL if a.models == "all" else [m.strip() for m in a.models.split(",") if m.strip()]
    contenders = select_contenders(a.skip)
    unknown = [s for s in a.skip if not any(s in (c[0], c[1]) or (s.endswith("*") and c[0].startswith(s[:-1]))
                                            for c in CONTENDERS)]
    if unknown:
        ap.error(f"--skip: unknown contender(s) {unknown}")
    if not contenders:
        ap.error("every contender is skipped")
    os.makedirs(a.work, exist_ok=True)
    command = os.environ.get("COMPARE_COMMAND") or " ".join(["bench/compare/compare.py"] + sys.argv[1:])
    meta = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), "machine": machine_info(),
            "command": command, "git": git_describe(),
            "env": {k: v for k, v in sorted(os.environ.items())
                    if k.startswith(("OMP_", "GOMP_", "KMP_", "MKL_", "DNNL_", "ONEDNN_", "SOFTNEURO_"))}}
    log(f"{meta['date']}: {meta['machine']['cpu']}, {meta['machine']['cores']} cores; threads {a.threads}; "
        f"{a.rounds} round(s) x {a.per_round} runs; models {', '.join(models)}")
    log("contenders: " + " ".join(contenders))

    # the zoo: export what is missing (Debian's interpreter, which has torch and onnx)
    missing = [m for m in models if not all(os.path.exists(os.path.join(a.zoo, m + s))
                                            for s in (".onnx", ".input.npy", ".output.npy"))]
    if missing:
        log(f"exporting the zoo: {' '.join(missing)}")
        r = subprocess.run([SYS_PY, os.path.join(ROOT, "bench", "models", "export_zoo.py"), *missing, "--out", a.zoo],
                           cwd=ROOT)
        if r.returncode != 0:
            log("export_zoo.py reported failures (see above)")
    models_ok = [m for m in models if os.path.exists(os.path.join(a.zoo, m + ".onnx"))]
    for m in models:
        if m not in models_ok:
            log(f"{m}: not in the zoo and could not be exported; left out")
    if not models_ok:
        sys.exit("no models to run")

    versions = {}
    built = "?"
    if os.path.exists(a.cli):
        built = datetime.datetime.fromtimestamp(os.path.getmtime(a.cli)).astimezone().strftime("%Y-%m-%d %H:%M")
        cli_name = os.path.relpath(a.cli, ROOT)
        try:
            a.cli = snapshot_cli(a.cli, os.path.join(a.work, "cli"))
        except OSError as e:
            log(f"could not copy the CLI ({e}); using it in place")
        try:
            versions["softneuro"] = subprocess.run([a.cli, "--version"], capture_output=True, text=True).stdout.split()[-1]
        except Exception:
            versions["softneuro"] = "?"
        versions["softneuro"] += f" ({cli_name} built {built}, tree at git {meta['git']})"

    a.calib_dir = os.path.join(a.work, "calib")
    x0 = np.load(os.path.join(a.zoo, models_ok[0] + ".input.npy"), mmap_mode="r")
    meta["calibration"] = f"{calib.BATCHES} seeded N(0,1) batches {list(x0.shape)} (softneuro's default; made by " \
                          + calib.make_calibration(a.calib_dir, x0.shape, a.cli) + ")"
    results = {}
    t_all = time.monotonic()
    for m in models_ok:
        x = np.load(os.path.join(a.zoo, m + ".input.npy"), mmap_mode="r")
        if x.shape != x0.shape:
            log(f"{m}: input {x.shape} differs from {x0.shape}: the calibration batches do not fit; left out")
            continue
        t0 = time.monotonic()
        try:
            results[m] = bench_model(a, m, contenders)
        except Exception as e:  # a bug here must not lose the other models
            import traceback
            traceback.print_exc()
            results[m] = {"contenders": {c: {"status": "failed", "reason": f"harness error: {e!r}"} for c in contenders},
                          "tuning": {}, "reference_max_abs": float("nan")}
        results[m]["wall_s"] = time.monotonic() - t0
        for cid, c in results[m]["contenders"].items():
            for k in ("version",):
                if c.get("info", {}).get(k):
                    lib = c["info"][k].split()[0]
                    versions.setdefault(lib, c["info"][k].split(" ", 1)[1])
            if c.get("info", {}).get("engine"):
                versions.setdefault("torch int8 engine", c["info"]["engine"])
        meta.update(versions=versions, loadavg_end=list(os.getloadavg()), wall_s=time.monotonic() - t_all)
        md = write_reports(a, meta, results, list(results), contenders)  # after every model: partial results survive
        log(f"[{m}] done in {results[m]['wall_s']:.0f} s")
    print()
    print(md)
    log(f"wrote {os.path.relpath(os.path.join(a.results, 'compare.md'), ROOT)}, compare.json, compare.svg")


if __name__ == "__main__":
    main()
