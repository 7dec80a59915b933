"""Small text models end to end, as a new user meets them: tiny BERT (the
TorchScript exporter, opset 17; and quantised by ONNX Runtime's
quantize_dynamic: an int8 embedding table, MatMulInteger; and after ONNX
Runtime's transformer optimizer: QEmbedLayerNormalization, QAttention) and GPT-2 (the
dynamo exporter, opset 23) made by data/make_text_models.py, imported with no flags, run at two
sequence lengths and with a padded attention mask against ONNX Runtime's
outputs (stored beside them), then tuned with default options and run again."""
import os

import numpy as np
import pytest

import softneuro

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def cases(name):
    z = np.load(os.path.join(DATA, name + ".ort.npz"))
    k = 0
    while f"{k}.input_ids" in z:
        yield {n: z[f"{k}.{n}"] for n in ("input_ids", "attention_mask")}, z[f"{k}.last_hidden_state"]
        k += 1


def check(model, name):
    s = softneuro.Session(model, threads=1)
    ran = 0
    for feeds, want in cases(name):
        got = s.run(feeds)["last_hidden_state"]
        assert got.shape == want.shape
        assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want)), feeds
        ran += 1
    assert ran == 3


@pytest.mark.parametrize("name", ["tiny_bert", "tiny_gpt2", "tiny_bert_int8", "tiny_bert_opt_int8"])
def test_a_text_model_imports_runs_at_any_length_and_tunes(name):
    m = softneuro.import_onnx(os.path.join(DATA, name + ".onnx"))
    ids = next(t for t in m.inputs if t.name == "input_ids")
    assert ids.dtype == np.int64 and ids.shape[1] == -1  # the sequence stays dynamic
    check(m, name)
    tuned = softneuro.tune(m, cache_dir="-")  # default options (no cache: the test measures afresh)
    check(tuned, name)
