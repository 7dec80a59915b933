#!/usr/bin/python3
"""Exports torchvision classification models to ONNX for the importer's checks.

Run with Debian's interpreter (/usr/bin/python3, with python3-torch,
python3-torchvision and python3-onnx from bench/install-bench-deps.sh):

    /usr/bin/python3 bench/models/export_zoo.py                 # the five zoo models
    /usr/bin/python3 bench/models/export_zoo.py resnet18 googlenet --out /tmp/more

For each model NAME it writes, under --out (default bench/models/zoo/, ignored by git):
    NAME.onnx         opset 13 (--opset), input "input" 1x3x224x224, output "output"
    NAME.input.npy    the reference input (seeded standard normal values)
    NAME.output.npy   PyTorch's output for it

Weights are random (seeded), so nothing is downloaded. Random initialisation
leaves BatchNorm statistics at mean 0 / variance 1, which shrinks or blows up
activations layer after layer (deep nets end near 1e-9); so before export the
statistics are re-estimated with a few training-mode forward passes on random
inputs, which gives outputs of a sane scale (their standard deviation is printed).
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torchvision

ZOO = ["vgg16", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small"]


def build(name):
    kwargs = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=True)
    return getattr(torchvision.models, name)(**kwargs)


def randomize_zero_layers(model):
    """Some models initialise a layer to zeros (ViT's classification head), which
    makes the output identically 0 and any comparison meaningless: such layers
    get small random weights instead."""
    n = 0
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and not m.weight.any():
                torch.nn.init.normal_(m.weight, std=0.02)
                n += 1
    return n


def calibrate_batchnorm(model, passes, batch, seed):
    """Re-estimates every BatchNorm's running mean/var as the plain average over
    `passes` training-mode forward passes on random inputs."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return 0
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average instead of an exponential one
    gen = torch.Generator().manual_seed(seed + 1)
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(torch.randn(batch, 3, 224, 224, generator=gen))
    model.eval()
    return len(norms)


def export(name, out_dir, opset, seed, passes, batch, external_data):
    torch.manual_seed(seed)
    model = build(name).eval()
    t0 = time.time()
    randomize_zero_layers(model)
    norms = calibrate_batchnorm(model, passes, batch, seed)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        y = model(x)
    path = os.path.join(out_dir, name + ".onnx")
    torch.onnx.export(model, x, path, opset_version=opset, input_names=["input"],
                      output_names=["output"], do_constant_folding=True)
    if external_data:
        import onnx
        m = onnx.load(path)
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=name + ".onnx.data", size_threshold=1024)
    np.save(os.path.join(out_dir, name + ".input.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(out_dir, name + ".output.npy"), y.numpy().astype(np.float32))
    out = y.numpy()
    print(f"{name:22s} {norms:3d} batchnorms re-estimated, output {list(out.shape)} std {out.std():.4g} "
          f"max|y| {np.abs(out).max():.4g}  ({time.time() - t0:.1f} s) -> {path}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=ZOO, help="torchvision model names (default: %(default)s)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo"))
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bn-passes", type=int, default=4, help="training-mode passes to estimate BatchNorm statistics")
    ap.add_argument("--bn-batch", type=int, default=8)
    ap.add_argument("--external-data", action="store_true", help="store initializers in NAME.onnx.data")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name in args.models:
        try:
            export(name, args.out, args.opset, args.seed, args.bn_passes, args.bn_batch, args.external_data)
        except Exception as e:  # keep going: report every model that fails to export
            print(f"{name:22s} EXPORT FAILED: {type(e).__name__}: {e}", flush=True)
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
