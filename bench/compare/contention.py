#!/usr/bin/env python3
"""Latency beside busy processes: ONNX Runtime against our .dnn with the
contention guard on and off (SOFTNEURO_CONTENTION_GUARD=0), interleaved rounds,
medians (2 threads, batch 1, a seeded normal image input).

    bench/.venv/bin/python bench/compare/contention.py MODEL.onnx MODEL.dnn BUSY ROUNDS [SHAPE [UNTUNED.dnn]]

SHAPE: the input's, as 1x3x48x320 (default 1x3x224x224); UNTUNED.dnn: the
imported file before tuning, run too (guard on). BUSY shell loops (`while :; do :; done`) hold CPUs meanwhile; 0 measures the quiet machine.
"""
import os, statistics, subprocess, sys, tempfile, time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
X_PATH = os.path.join(tempfile.mkdtemp(prefix='contention_'), 'x.npy')
onnx, dnn, nbusy, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
shape = tuple(int(d) for d in (sys.argv[5] if len(sys.argv) > 5 else '1x3x224x224').split('x'))
x = np.random.default_rng(0).standard_normal(shape).astype(np.float32); np.save(X_PATH, x)
so = ort.SessionOptions(); so.intra_op_num_threads = 2; so.inter_op_num_threads = 1
s = ort.InferenceSession(onnx, so, providers=["CPUExecutionProvider"]); name = s.get_inputs()[0].name
def ort_round(n=15):
    s.run(None, {name: x}); t=[]
    for _ in range(n):
        t0=time.perf_counter(); s.run(None, {name: x}); t.append((time.perf_counter()-t0)*1e3)
    return statistics.median(t)
untuned = sys.argv[6] if len(sys.argv) > 6 else None
def ours(env, n=15, dnn=dnn):
    e = dict(os.environ); e.update(env)
    out = subprocess.run([os.path.join(ROOT, 'build', 'softneuro'),'run',dnn,'--repeat',str(n),'--threads','2','--top','0','--input',f'{name}={X_PATH}'],capture_output=True,text=True,env=e).stdout
    return float(out.split('median ')[1].split(' ms')[0])
busy = [subprocess.Popen(['sh','-c','while :; do :; done']) for _ in range(nbusy)]
try:
    r, on, off, un = [], [], [], []
    for k in range(rounds):
        r.append(ort_round()); on.append(ours({})); off.append(ours({'SOFTNEURO_CONTENTION_GUARD':'0'}))
        if untuned: un.append(ours({}, dnn=untuned))
    m = statistics.median
    print(f"busy={nbusy}: ORT {m(r):.1f}  ours guard on {m(on):.1f} ({m(on)/m(r):.2f}x ORT)  guard off {m(off):.1f} ({m(off)/m(r):.2f}x)"
          + (f"  untuned {m(un):.1f} ({m(un)/m(r):.2f}x)" if untuned else ""))
    print("  rounds ORT", [round(v,1) for v in r], "on", [round(v,1) for v in on], "off", [round(v,1) for v in off],
          *(["untuned", [round(v,1) for v in un]] if untuned else []))
finally:
    for b in busy: b.kill()
