#!/usr/bin/env python3
"""A client of softneuro_serve.py, and a load test: C clients, each sending
batch-1 requests one after another; prints requests per second and latency.

    python examples/serve/client.py http://127.0.0.1:8000/ --input x=1x3x224x224 [--clients 4] [--requests 200]
"""
import argparse
import io
import threading
import time
import urllib.error
import urllib.request

import numpy as np


def infer(url: str, inputs: dict, timeout: float = 60) -> tuple:
    """POSTs the inputs as .npz; returns ({output name: array}, {"replica": its process id,
    "model": the file it runs})."""
    buf = io.BytesIO()
    np.savez(buf, **inputs)
    req = urllib.request.Request(url, data=buf.getvalue(), method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
            served_by = {"replica": r.headers.get("x-softneuro-replica", ""),
                         "model": r.headers.get("x-softneuro-model", "")}
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: {e.code}: {e.read().decode(errors='replace')}") from None
    with np.load(io.BytesIO(body), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}, served_by


def load_test(url: str, inputs: dict, clients: int, requests: int) -> dict:
    """`requests` in all from `clients` threads; requests/s and latency percentiles (ms)."""
    latencies, errors, lock = [], [], threading.Lock()
    per_client = [requests // clients + (i < requests % clients) for i in range(clients)]

    def client(n):
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                infer(url, inputs)
            except Exception as e:  # counted, not raised: the figure says how many failed
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                latencies.append((time.perf_counter() - t0) * 1e3)

    threads = [threading.Thread(target=client, args=(n,)) for n in per_client]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = np.array(latencies or [float("nan")])
    return {"requests_per_s": len(latencies) / wall, "p50_ms": float(np.percentile(lat, 50)),
            "p90_ms": float(np.percentile(lat, 90)), "errors": len(errors)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--input", action="append", required=True, help="NAME=1x3x224x224 (seeded random values)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=200)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    inputs = {}
    for spec in a.input:
        name, shape = spec.split("=", 1)
        inputs[name] = rng.standard_normal([int(d) for d in shape.split("x")]).astype(np.float32)
    infer(a.url, inputs)  # warm: each replica plans the shape on its first request
    r = load_test(a.url, inputs, a.clients, a.requests)
    print(f"{r['requests_per_s']:.1f} requests/s, p50 {r['p50_ms']:.1f} ms, p90 {r['p90_ms']:.1f} ms, "
          f"{r['errors']} errors ({a.clients} clients, {a.requests} requests)")


if __name__ == "__main__":
    main()
