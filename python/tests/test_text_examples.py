"""examples/text: the GPT-2 greedy decode with a KV cache (tokens equal to ONNX
Runtime's greedy decode of the same file) and the sentence-embedding example
with a `tokenizers` tokenizer, on the tiny models of data/."""
import os
import subprocess
import sys

import numpy as np
import pytest

import softneuro

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "text")
sys.path.insert(0, EXAMPLES)


def test_gpt2_greedy_decode_with_a_kv_cache_equals_onnx_runtime():
    import gpt2_decode
    want = np.load(os.path.join(DATA, "tiny_gpt2_kv.ort.npz"))
    model = softneuro.import_onnx(os.path.join(DATA, "tiny_gpt2_kv.onnx"))
    mask = next(t for t in model.inputs if t.name == "attention_mask")
    assert mask.shape == [-1, -1]  # past_sequence + sequence: a sum of sizes, not frozen
    tokens = gpt2_decode.decode(model, [int(x) for x in want["prompt"][0]], len(want["tokens"]))
    assert tokens == [int(x) for x in want["tokens"]]


def test_a_long_decode_builds_a_plan_per_shape_bucket_not_per_length():
    import gpt2_decode
    want = np.load(os.path.join(DATA, "tiny_gpt2_kv.ort.npz"))
    model = softneuro.import_onnx(os.path.join(DATA, "tiny_gpt2_kv.onnx"))
    session = softneuro.Session(model)
    steps = 300
    tokens = gpt2_decode.decode(model, [int(x) for x in want["prompt"][0]], steps, session=session)
    assert tokens[:len(want["tokens"])] == [int(x) for x in want["tokens"]]
    counts = session.plan_counts()
    # One plan at creation, then one per step: built while fewer than 4 are
    # kept or at a new bucket of the cache or mask length (about two per
    # power of two up to 304), re-bound otherwise.
    assert counts["built"] + counts["rebound"] == steps + 1
    assert counts["built"] <= 24, counts


def test_the_decode_example_runs_from_the_command_line():
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "gpt2_decode.py"), os.path.join(DATA, "tiny_gpt2_kv.onnx"),
                        "--steps", "8"], capture_output=True, text=True, check=True)
    assert "tokens: 85,81,43,47,47,19,63,81" in r.stdout
    assert "plans built" in r.stdout


def test_sentence_embeddings_with_a_tokenizer():
    pytest.importorskip("tokenizers")
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "sentence_embedding.py"), os.path.join(DATA, "tiny_bert.onnx"),
                        os.path.join(DATA, "tiny_tokenizer.json"), "the cat sat on the mat", "a dog ran in the park",
                        "the cat sat on the mat"], capture_output=True, text=True, check=True)
    lines = r.stdout.splitlines()
    assert lines[0] == "3 embeddings of 32 values"
    sims = [[float(x) for x in line.split()[:3]] for line in lines[1:4]]
    assert sims[0][0] == pytest.approx(1.0, abs=1e-5) and sims[0][2] == pytest.approx(1.0, abs=1e-5)  # the same sentence
    assert sims[0][1] < 0.9999
