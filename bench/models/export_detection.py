#!/usr/bin/python3
"""Exports torchvision detection models with their post-processing (NMS, TopK,
RoiAlign, If) to ONNX, as a user would with torch.onnx.export.

Run with Debian's interpreter (/usr/bin/python3, with python3-torch,
python3-torchvision and python3-onnx from bench/install-bench-deps.sh):

    /usr/bin/python3 bench/models/export_detection.py            # the three models
    /usr/bin/python3 bench/models/export_detection.py ssdlite320_mobilenet_v3_large --out /tmp/det

For each model NAME it writes, under --out (default bench/models/detection/, ignored by git):
    NAME.onnx            opset 16, input "images" [3, 320, 320], outputs boxes, scores and labels
                         in the order the model returns them
    NAME.input{0..4}.npy five seeded images (uniform in [0, 1))

Weights come from the models' own initialisation (nothing is downloaded); the
BatchNorm statistics are re-estimated with training-mode passes of the
backbone and head on random images (bench/models/export_zoo.py does the same
for classifiers). Randomly initialised classifiers score every class near
1/classes (Faster R-CNN: its score threshold is lowered to keep boxes) or
their prior within a few millionths (RetinaNet: spread_scores), so that the
post-processing has work to do and its result is not decided by rounding.
"""
import argparse
import os
import time

import numpy as np
import torch
import torchvision

MODELS = {
    "ssdlite320_mobilenet_v3_large": {},
    "retinanet_resnet50_fpn": {},
    "fasterrcnn_mobilenet_v3_large_320_fpn": {"box_score_thresh": 0.0112},
}


def spread_scores(name, model):
    """RetinaNet's class logits start at std 0.01 around its prior: every score within
    0.0108..0.0111, so which 300 boxes are kept turns on rounding in the last digits
    (in ONNX Runtime as in PyTorch). Weights of std 0.3 spread them as training would."""
    if name.startswith("retinanet"):
        torch.nn.init.normal_(model.head.classification_head.cls_logits.weight, std=0.3)


def calibrate_batchnorm(model, passes, seed):
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    gen = torch.Generator().manual_seed(seed + 1)
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            images, _ = model.transform(list(torch.rand(2, 3, 320, 320, generator=gen)))
            features = model.backbone(images.tensors)
            if hasattr(model, "head"):  # SSD and RetinaNet; the R-CNN heads hold no BatchNorm
                model.head(list(features.values()) if isinstance(features, dict) else [features])
    model.eval()
    return len(norms)


def export(name, out_dir, seed, passes):
    torch.manual_seed(seed)
    model = getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None, **MODELS[name])
    t0 = time.time()
    spread_scores(name, model)
    norms = calibrate_batchnorm(model, passes, seed)
    images = [torch.rand(3, 320, 320, generator=torch.Generator().manual_seed(seed + 10 + k)) for k in range(5)]
    with torch.no_grad():
        out = model([images[0]])[0]
    names = list(out.keys())
    path = os.path.join(out_dir, name + ".onnx")
    torch.onnx.export(model, ([images[0]],), path, opset_version=16, input_names=["images"], output_names=names)
    for k, x in enumerate(images):
        np.save(os.path.join(out_dir, f"{name}.input{k}.npy"), x.numpy().astype(np.float32))
    print(f"{name}: {norms} batchnorms re-estimated, {len(out['boxes'])} boxes on image 0, outputs {names} "
          f"({time.time() - t0:.1f} s) -> {path}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=list(MODELS), help="default: %(default)s")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "detection"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bn-passes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    for name in args.models:
        export(name, args.out, args.seed, args.bn_passes)


if __name__ == "__main__":
    main()
