#!/usr/bin/env python3
"""Makes the tiny text models of test_text_models.py and their ONNX Runtime
outputs (run once with torch, transformers and onnxruntime; the files are
committed, so the tests need none of them):

    python python/tests/data/make_text_models.py

BERT (the TorchScript exporter, opset 17; and quantised by ONNX Runtime's
quantize_dynamic, also after its transformer optimizer) and GPT-2 (the dynamo exporter, opset 23) from configs with
seeded random weights, one layer of width 32,
input_ids and attention_mask [batch, sequence]; inputs at lengths 12 and 7,
and 12 with the last 3 positions padded. And GPT-2 with its LM head and a KV
cache (tiny_gpt2_kv.onnx, the TorchScript exporter at opset 17: input_ids
[batch, sequence], attention_mask [batch, past_sequence + sequence], past_0 ...
past_3 [batch, 2, past_sequence, 16]; logits and present_0 ... present_3) with
ONNX Runtime's greedy decode of 12 tokens, and a WordPiece tokenizer trained
on a few sentences (tiny_tokenizer.json) for the examples.
"""
import inspect
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


class LmWithCache(torch.nn.Module):
    """logits and the updated cache of one step, the cache as plain tensors (two per layer)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, *past):
        pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2))
        if "config" in inspect.signature(tf.DynamicCache.__init__).parameters:
            cache = tf.DynamicCache(config=self.m.config)
            for i, (k, v) in enumerate(pairs):
                cache.update(k, v, i)
        else:  # transformers 4.x (beside Debian's torch 1.13): the cache as legacy tuples
            cache = pairs
        out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        pkv = out.past_key_values
        if hasattr(pkv, "layers"):
            layers = [(layer.keys, layer.values) for layer in pkv.layers]
        else:
            layers = pkv.to_legacy_cache() if hasattr(pkv, "to_legacy_cache") else pkv
        return (out.logits, *[t for kv in layers for t in kv])


def greedy(sess, prompt, steps, layers, heads, head_dim):
    """ONNX Runtime's greedy decode: the prompt's tokens in one step, then one token a step."""
    past = [np.zeros((1, heads, 0, head_dim), np.float32) for _ in range(2 * layers)]
    ids, tokens = prompt, []
    length = 0
    for _ in range(steps):
        length += ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, length), np.int64)}
        feeds.update({f"past_{i}": p for i, p in enumerate(past)})
        logits, *past = sess.run(None, feeds)
        token = int(logits[0, -1].argmax())
        tokens.append(token)
        ids = np.array([[token]], np.int64)
    return tokens


def tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers, processors
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=100, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    text = ["the cat sat on the mat", "a dog ran in the park", "inference runs as fast as the device allows",
            "models are tuned once on the target device", "the tokenizer splits words into pieces"]
    t.train_from_iterator(text, trainer)
    t.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    t.save(os.path.join(HERE, "tiny_tokenizer.json"))


def optimized_int8():
    """tiny_bert.onnx through ONNX Runtime's transformer optimizer, then
    quantize_dynamic, as its documentation for BERT has it:
    QEmbedLayerNormalization, QAttention and MatMulInteger (tiny_bert_opt_int8)."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    # Exported here with the attention as transformers 4.36 writes it (MatMul, Softmax,
    # MatMul), which the optimizer fuses; a newer exporter's SDPA form it leaves apart.
    torch.manual_seed(0)
    bert = tf.BertModel(tf.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64,
                                      attn_implementation="eager")).eval()
    names = ["input_ids", "attention_mask"]
    plain, optimized = os.path.join(HERE, "tiny_bert_plain.onnx"), os.path.join(HERE, "tiny_bert_opt.onnx")
    with torch.no_grad():
        torch.onnx.export(LastHidden(bert), (torch.zeros(1, 8, dtype=torch.int64), torch.ones(1, 8, dtype=torch.int64)),
                          plain, input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names}, opset_version=17)
    optimize_model(plain, model_type="bert", num_heads=2, hidden_size=32, opt_level=1,
                   use_gpu=False).save_model_to_file(optimized)
    os.remove(plain)
    path = os.path.join(HERE, "tiny_bert_opt_int8.onnx")
    quantize_dynamic(optimized, path, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    os.remove(optimized)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    arrays = {}
    for k, feeds in enumerate(cases(100)):
        for n, v in feeds.items():
            arrays[f"{k}.{n}"] = v
        arrays[f"{k}.last_hidden_state"] = sess.run(None, feeds)[0]
    np.savez(os.path.join(HERE, "tiny_bert_opt_int8.ort.npz"), **arrays)


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
    # The same BERT quantised by ONNX Runtime's quantize_dynamic (int8 weights, an
    # int8 embedding table gathered and then dequantised, MatMulInteger).
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantize_dynamic(os.path.join(HERE, "tiny_bert.onnx"), os.path.join(HERE, "tiny_bert_int8.onnx"),
                     weight_type=QuantType.QInt8)
    for name in ("tiny_bert", "tiny_gpt2", "tiny_bert_int8"):
        sess = ort.InferenceSession(os.path.join(HERE, name + ".onnx"), providers=["CPUExecutionProvider"])
        arrays = {}
        for k, feeds in enumerate(cases(100)):
            for n, v in feeds.items():
                arrays[f"{k}.{n}"] = v
            arrays[f"{k}.last_hidden_state"] = sess.run(None, feeds)[0]
        np.savez(os.path.join(HERE, name + ".ort.npz"), **arrays)
    optimized_int8()
    torch.manual_seed(0)
    # A wide initialisation: logits that differ from token to token (the default gives one token throughout).
    lm = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=1100,
                                          initializer_range=0.5)).eval()
    names = ["input_ids", "attention_mask"] + [f"past_{i}" for i in range(4)]
    dyn = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "past_sequence + sequence"}}
    dyn.update({f"past_{i}": {0: "batch", 2: "past_sequence"} for i in range(4)})
    args = (torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 4, dtype=torch.int64), *[torch.randn(1, 2, 3, 16) for _ in range(4)])
    path = os.path.join(HERE, "tiny_gpt2_kv.onnx")
    with torch.no_grad():
        torch.onnx.export(LmWithCache(lm), args, path, input_names=names,
                          output_names=["logits"] + [f"present_{i}" for i in range(4)], dynamic_axes=dyn, opset_version=17,
                          dynamo=False)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    prompt = np.array([[5, 17, 42, 8]], np.int64)
    np.savez(os.path.join(HERE, "tiny_gpt2_kv.ort.npz"), prompt=prompt, tokens=np.array(greedy(sess, prompt, 12, 2, 2, 16)))
    tokenizer()


if __name__ == "__main__":
    main()
