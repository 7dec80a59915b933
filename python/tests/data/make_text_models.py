#!/usr/bin/env python3
"""Makes the tiny text models of test_text_models.py and their ONNX Runtime
outputs (run once with torch, transformers and onnxruntime; the files are
committed, so the tests need none of them):

    python python/tests/data/make_text_models.py

BERT (the TorchScript exporter, opset 17) and GPT-2 (the dynamo exporter,
opset 23) from configs with seeded random weights, one layer of width 32,
input_ids and attention_mask [batch, sequence]; inputs at lengths 12 and 7,
and 12 with the last 3 positions padded.
"""
import os

import numpy as np
import torch
import transformers as tf

HERE = os.path.dirname(os.path.abspath(__file__))


class LastHidden(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask)[0]


def cases(vocab):
    rng = np.random.default_rng(5)
    out = []
    for seq, padded in ((12, False), (7, False), (12, True)):
        ids = rng.integers(0, vocab, size=(1, seq), dtype=np.int64)
        mask = np.ones((1, seq), dtype=np.int64)
        if padded:
            mask[0, -3:] = 0
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def main():
    import onnxruntime as ort
    torch.manual_seed(0)
    bert = tf.BertModel(tf.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64)).eval()
    gpt2 = tf.GPT2Model(tf.GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=2, n_positions=64)).eval()
    names = ["input_ids", "attention_mask"]
    args = (torch.zeros(1, 8, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64))
    with torch.no_grad():
        path = os.path.join(HERE, "tiny_bert.onnx")
        torch.onnx.export(LastHidden(bert), args, path, input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names}, opset_version=17, dynamo=False)
        seq = torch.export.Dim("sequence", min=2, max=64)
        path = os.path.join(HERE, "tiny_gpt2.onnx")
        torch.onnx.export(LastHidden(gpt2), args, path, input_names=names, output_names=["last_hidden_state"],
                          dynamic_shapes=({1: seq}, {1: seq}), opset_version=23, dynamo=True, external_data=False)
    for name in ("tiny_bert", "tiny_gpt2"):
        sess = ort.InferenceSession(os.path.join(HERE, name + ".onnx"), providers=["CPUExecutionProvider"])
        arrays = {}
        for k, feeds in enumerate(cases(100)):
            for n, v in feeds.items():
                arrays[f"{k}.{n}"] = v
            arrays[f"{k}.last_hidden_state"] = sess.run(None, feeds)[0]
        np.savez(os.path.join(HERE, name + ".ort.npz"), **arrays)


if __name__ == "__main__":
    main()
