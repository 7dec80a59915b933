#!/usr/bin/env python3
"""Decoders as Hugging Face Optimum exports them (`optimum-cli export onnx --task
text-generation-with-past`: one model.onnx taking past_key_values, its
attention mask named "past_sequence_length + 1"), each a tiny config with seeded
weights (decoder_models.causal_lm), imported with no flags, then run as a
generation loop in one `softneuro run` per step (a 5-token prompt over an empty
cache, then 1, 1, 3 and 1 tokens, the cache ONNX Runtime returned fed back)
against ONNX Runtime on the same file.

Needs optimum 1.16 with transformers 4.36 and a torch whose TorchScript
exporter it drives (its own venv: torch from the package index):

    python3 -m venv --system-site-packages /tmp/optimum-venv
    /tmp/optimum-venv/bin/pip install "transformers==4.36.2" "optimum==1.16.2" onnx==1.23.2 onnxruntime==1.32.0 onnxscript
    /tmp/optimum-venv/bin/python bench/transformers/optimum_decoders.py --cli build/softneuro --out /tmp/optimum

With --nbits 4 each file first goes through ONNX Runtime's weight-only quantizer
(MatMulNBits, block 32; --symmetric: without zero points), and both run that file.

Exits 1 if any output is off by more than 1e-4 of its largest value, or a model does not import or run.
"""
import argparse
import functools
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_models import run_cli  # noqa: E402

TOL = 1e-4


def export(name, out):
    import torch
    import decoder_models
    # torch 2.9 and later export with dynamo by default; Optimum 1.16 drives the TorchScript exporter.
    plain = torch.onnx.export
    torch.onnx.export = functools.wraps(plain)(lambda *a, **k: plain(*a, **{**k, "dynamo": False}))
    from optimum.exporters.onnx import main_export
    torch.manual_seed(0)
    hf = os.path.join(out, name + "_hf")
    decoder_models.causal_lm(name).save_pretrained(hf)
    main_export(hf, output=os.path.join(out, name), task="text-generation-with-past", opset=17)
    return os.path.join(out, name, "model.onnx")


def quantize(path, bits, symmetric, embeddings=False):
    """The file with its MatMul weights blockwise (MatMulNBits), as LLM files ship. (The quantizer's QDQ form,
    blocked DequantizeLinear, needs opset 21, which these exports are not; the tests cover it.)"""
    import logging
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    q = MatMulNBitsQuantizer(onnx.load(path), bits=bits, block_size=32, is_symmetric=symmetric,
                             op_types_to_quantize=("MatMul", "Gather") if embeddings else None)
    q.process()
    out = path.replace(".onnx", f"_{bits}bit.onnx")
    q.model.save_model_to_file(out, use_external_data_format=False)
    ops = [n.op_type for n in q.model.model.graph.node]
    print(f"{os.path.basename(os.path.dirname(out))}: {ops.count('MatMulNBits')} MatMulNBits, "
          f"{ops.count('GatherBlockQuantized')} GatherBlockQuantized, {ops.count('MatMul')} MatMul left")
    return out


def generate(cli, path, dnn, work):
    import onnx
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    g = onnx.load(path, load_external_data=False).graph
    ins = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in g.input}
    outs = [o.name for o in g.output]
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    # An empty cache: batch 1 (Bloom's leading dim is batch x heads), no past positions.
    heads = {}
    past = {}
    for n, dims in ins.items():
        if n.startswith("past"):
            shape = []
            for d in dims:
                if isinstance(d, int) and d:
                    shape.append(d)
                elif "num_heads" in d:
                    shape.append(heads.setdefault(n, 4))
                else:
                    shape.append(1 if "batch" in d else 0)
            past[n] = np.zeros(shape, np.float32)
    total, worst = 0, 0.0
    for step, S in enumerate([5, 1, 1, 3, 1]):
        feeds = {"input_ids": rng.integers(0, 1000, (1, S)).astype(np.int64)}
        if "attention_mask" in ins:
            feeds["attention_mask"] = np.ones((1, total + S), np.int64)
        if "position_ids" in ins:
            feeds["position_ids"] = np.arange(total, total + S, dtype=np.int64)[None]
        feeds.update(past)
        ref = s.run(outs, feeds)
        try:
            gots = run_cli(cli, dnn, feeds, outs, work, f"step{step}")
        except RuntimeError as e:
            raise RuntimeError(f"step {step}: {e}") from e
        for o, got, want in zip(outs, gots, ref):
            if got.shape != want.shape:
                raise RuntimeError(f"step {step}: {o} {got.shape} against {want.shape}")
            worst = max(worst, float(np.max(np.abs(got - want)) / max(1e-30, float(np.max(np.abs(want))))))
        total += S
        for o, want in zip(outs, ref):
            if o.startswith("present"):
                past[o.replace("present", "past_key_values")] = want
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/softneuro")
    ap.add_argument("--out", default="/tmp/optimum")
    ap.add_argument("--models", default="gpt2,llama,mistral,phi,opt,bloom,gpt-neox,codegen")
    ap.add_argument("--nbits", type=int, default=0,
                    help="first through ONNX Runtime's weight-only quantizer: MatMuls with constant weights to MatMulNBits "
                         "of these bits, block 32")
    ap.add_argument("--symmetric", action="store_true", help="symmetric codes (no zero points)")
    ap.add_argument("--embeddings", action="store_true", help="the token embedding's Gather too (GatherBlockQuantized)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for name in a.models.split(","):
        try:
            path = export(name, a.out)
        except Exception as e:  # noqa: BLE001 - an exporter failure is reported, not ours
            print(f"{name}: export failed: {str(e).splitlines()[0][:200]}")
            continue
        if a.nbits:
            path = quantize(path, a.nbits, a.symmetric, a.embeddings)
        dnn = os.path.join(a.out, name + ".dnn")
        r = subprocess.run([a.cli, "import", path, "-o", dnn], capture_output=True, text=True)
        if r.returncode:
            print(f"{name}: import FAILED: {r.stderr.strip()[-400:]}")
            bad += 1
            continue
        try:
            worst = generate(a.cli, path, dnn, a.out)
        except RuntimeError as e:
            print(f"{name}: FAILED: {e}")
            bad += 1
            continue
        ok = worst <= TOL
        bad += not ok
        print(f"{name}: 5 steps (prompt 5, then 1, 1, 3, 1 tokens): largest difference {worst:.2e} {'ok' if ok else 'FAIL'}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
