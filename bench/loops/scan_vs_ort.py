"""Same run, interleaved, 5 rounds: ours (`softneuro run --repeat 20`, its median) against
ONNX Runtime (median of 20 runs), 2 threads; prints the medians of the rounds.
bench/.venv/bin/python bench/loops/scan_vs_ort.py build/softneuro OUT_DIR/rnn_scan.dnn OUT_DIR/rnn_scan.onnx OUT_DIR/x.npy"""
import subprocess, time, sys, re, numpy as np, onnxruntime as ort
cli, dnn, onnx_path, x_path = sys.argv[1:5]
x = np.load(x_path)
so = ort.SessionOptions(); so.intra_op_num_threads = 2
s = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
def ort_ms(n=20):
    s.run(None, {"x": x}); t = []
    for _ in range(n):
        t0 = time.perf_counter(); s.run(None, {"x": x}); t.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(t))
def ours_ms():
    r = subprocess.run([cli, "run", dnn, "--input", f"x={x_path}", "--repeat", "20", "--top", "0"], capture_output=True, text=True)
    m = re.search(r"median ([0-9.]+) ms", r.stdout + r.stderr)
    return float(m.group(1)) if m else (print(r.stdout, r.stderr) or -1)
rows = []
for _ in range(5):
    rows.append((ours_ms(), ort_ms()))
o = np.median([a for a, _ in rows]); p = np.median([b for _, b in rows])
print(f"ours {o:.2f} ms, ONNX Runtime {p:.2f} ms, ratio ORT/ours {p/o:.2f} (rounds: {rows})")
