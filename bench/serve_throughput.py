#!/usr/bin/env python3
"""Throughput of a tuned .dnn on Ray Serve (examples/serve): deployments of 1
replica x T threads and R replicas x 1 thread side by side on one local Ray
instance, driven in turn (interleaved rounds, C clients of batch-1 requests
over HTTP); prints the median requests/s of each.

    build/python-venv/bin/pip install ".[serve]"
    build/python-venv/bin/python bench/serve_throughput.py MODEL.dnn --input x=1x3x224x224 [--rounds 3]
"""
import argparse
import os
import socket
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "serve"))
import client  # noqa: E402
import softneuro_serve  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--input", action="append", required=True, help="NAME=1x3x224x224")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=100, help="per round and deployment")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import ray
    from ray import serve

    cores = os.cpu_count()
    configs = [("1 replica x 1 thread", 1, 1), (f"1 replica x {cores} threads", 1, cores),
               (f"{cores} replicas x 1 thread", cores, 1)]
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "serve")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    # Logical CPUs enough for every deployment at once; only the one driven runs.
    ray.init(num_cpus=sum(r * t for _, r, t in configs), include_dashboard=False, log_to_driver=False,
             object_store_memory=100 * 1024 * 1024)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    rng = np.random.default_rng(0)
    inputs = {}
    for spec in a.input:
        name, shape = spec.split("=", 1)
        inputs[name] = rng.standard_normal([int(d) for d in shape.split("x")]).astype(np.float32)
    urls = []
    for k, (label, replicas, threads) in enumerate(configs):
        serve.run(softneuro_serve.application(a.model, replicas, threads), name=f"d{k}", route_prefix=f"/d{k}")
        urls.append(f"http://127.0.0.1:{port}/d{k}")
        for _ in range(4 * replicas):
            client.infer(urls[-1], inputs)  # every replica plans the shape
    rates = {label: [] for label, _, _ in configs}
    try:
        for r in range(a.rounds):
            for (label, _, _), url in zip(configs, urls):
                res = client.load_test(url, inputs, a.clients, a.requests)
                assert res["errors"] == 0, res
                rates[label].append(res["requests_per_s"])
                print(f"round {r + 1} {label}: {res['requests_per_s']:.1f} requests/s, p50 {res['p50_ms']:.1f} ms",
                      flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()
    base = statistics.median(rates[configs[0][0]])
    print(f"\n{os.path.basename(a.model)}, {a.clients} clients, {a.requests} requests x {a.rounds} rounds, "
          f"{cores} cores; median requests/s:")
    for label, _, _ in configs:
        m = statistics.median(rates[label])
        print(f"  {label:28s} {m:7.1f}  ({m / base:.2f}x)")


if __name__ == "__main__":
    main()
