"""PyTorch on the GPU, the peer of our CUDA backend (issue 56): torchvision's
ResNet50 and MobileNetV2 (seeded random weights: latency does not depend on
the values; MobileNetV2's convolutions drawn with fan-in scaling: torchvision's fan-out initialisation leaves its
outputs near 1e-8, below float16's range, so no float16 path could meet an accuracy budget; with fan-in they are
about 1) exported to ONNX with a dynamic batch for `softneuro import`, and
timed in PyTorch eager float32 and float16 (cuDNN, PyTorch's defaults: TF32
convolutions in float32) and torch.compile float16 (default mode, and "reduce-overhead", which replays CUDA graphs) at batch 1 and 8. "ms": device-event medians of
--runs runs after warm-up, the input already on the GPU; "host_ms": wall-time medians from a float32 input in host
memory to the float32 output back in host memory (upload, cast and download included, as `softneuro run` times
a run). Prints one JSON line per figure and writes them to --json.

    python3 bench/gpu/torch_peers.py --export DIR [--json OUT] [--runs 50] [--modes eager,compile,compile-graphs]
                                     [--models resnet50,mobilenet_v2,bert]

"bert": BERT-base (Hugging Face transformers, built from its config with seeded random weights by
bench/transformers/hf_models.py and exported as that script does, TorchScript exporter, opset 17) at sequence 128,
inputs input_ids and attention_mask (int64, all ones); "host_ms" from the host's int64 ids to the float32
last_hidden_state [B, 128, 768] back on the host.
"""
import argparse
import copy
import json
import os
import time

import sys

import torch
import torchvision

SEQ = 128


def median_ms(fn, runs):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def host_median_ms(model, batch, dtype, runs, text=False):
    """From a float32 host tensor (text: int64 ids and mask) to a float32 host tensor, wall time."""
    if text:
        ids, mask = torch.randint(0, 30522, (batch, SEQ)), torch.ones(batch, SEQ, dtype=torch.int64)
        fn = lambda: model(ids.to("cuda"), mask.to("cuda")).float().cpu()
    else:
        x = torch.randn(batch, 3, 224, 224)
        fn = lambda: model(x.to("cuda").to(dtype)).float().cpu()
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True)
    ap.add_argument("--json")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    modes = args.modes.split(",")
    for name in args.models.split(","):
        text = name == "bert"
        path = f"{args.export}/{name}.onnx"
        if text:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "transformers"))
            import hf_models
            if not os.path.exists(path):
                t0 = time.time()
                hf_models.export("bert", "base", "torchscript17", path)
                print(f"exported {path} in {time.time() - t0:.1f} s", flush=True)
            bert, _ = hf_models.build("bert", "base")
            model = hf_models.last_hidden_of_text(bert).eval()
        else:
            model = getattr(torchvision.models, name)(weights=None).eval()
            for m in model.modules() if name == "mobilenet_v2" else ():
                if isinstance(m, torch.nn.Conv2d):
                    torch.nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            if not os.path.exists(path):
                t0 = time.time()
                torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), path, input_names=["input"], output_names=["output"],
                                  dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=17,
                                  dynamo=False)
                print(f"exported {path} in {time.time() - t0:.1f} s", flush=True)
        model = model.cuda()

        def inputs(batch, dtype):
            if text:
                return (torch.randint(0, 30522, (batch, SEQ), device="cuda"),
                        torch.ones(batch, SEQ, dtype=torch.int64, device="cuda"))
            return (torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype),)
        with torch.inference_mode():
            if "eager" in modes:
                model_half = copy.deepcopy(model).half()
                for batch in (1, 8):
                    for label, m, dtype in (("eager float32", model, torch.float32),
                                            ("eager float16", model_half, torch.float16)):
                        x = inputs(batch, dtype)
                        rows.append({"model": name, "batch": batch, "peer": f"torch {label}",
                                     "ms": median_ms(lambda: m(*x), args.runs),
                                     "host_ms": host_median_ms(m, batch, dtype, args.runs, text)})
                        print(json.dumps(rows[-1]), flush=True)
            for mode in [m for m in modes if m.startswith("compile")]:
                # "compile": torch.compile's default mode; "compile-graphs": mode="reduce-overhead",
                # which replays CUDA graphs as our runs do.
                graphs = mode == "compile-graphs"
                compiled = torch.compile(copy.deepcopy(model).half(), mode="reduce-overhead" if graphs else None)
                for batch in (1, 8):
                    t0 = time.time()
                    x = inputs(batch, torch.float16)
                    for _ in range(3 if graphs else 1):  # reduce-overhead records its graph on the third call
                        compiled(*x)
                    rows.append({"model": name, "batch": batch,
                                 "peer": "torch.compile float16" + (" reduce-overhead" if graphs else ""),
                                 "ms": median_ms(lambda: compiled(*x), args.runs), "compile_s": round(time.time() - t0, 1),
                                 "host_ms": host_median_ms(compiled, batch, torch.float16, args.runs, text)})
                    print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                       "cudnn": torch.backends.cudnn.version(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
