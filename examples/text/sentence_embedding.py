#!/usr/bin/env python3
"""Sentence embeddings: a BERT-like encoder exported to ONNX (input_ids and
attention_mask [batch, sequence] -> last_hidden_state), a tokenizer from the
`tokenizers` package, mean pooling over the tokens the mask keeps, and the
cosine similarity of every pair of sentences. The model is imported with no
flags (any sentence length) and, with --tune, tuned once on this machine.

    python examples/text/sentence_embedding.py model.onnx tokenizer.json "a sentence" "another one" [--tune]
"""
import argparse

import numpy as np

import softneuro


def embed(session, tokenizer, sentences):
    """One L2-normalised embedding per sentence (mean of its tokens' hidden states)."""
    out = []
    for text in sentences:
        enc = tokenizer.encode(text)
        ids = np.array([enc.ids], np.int64)
        mask = np.array([enc.attention_mask], np.int64)
        hidden = session.run({"input_ids": ids, "attention_mask": mask})["last_hidden_state"][0]
        keep = mask[0].astype(bool)
        v = hidden[keep].mean(axis=0)
        out.append(v / max(np.linalg.norm(v), 1e-12))
    return np.stack(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="the encoder, .onnx or .dnn")
    ap.add_argument("tokenizer", help="a tokenizers JSON file (tokenizer.json)")
    ap.add_argument("sentences", nargs="+")
    ap.add_argument("--tune", action="store_true", help="tune the model on this machine first")
    a = ap.parse_args()
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(a.tokenizer)
    model = softneuro.import_onnx(a.model) if a.model.endswith(".onnx") else softneuro.load(a.model)
    if a.tune:
        model = softneuro.tune(model)
    e = embed(softneuro.Session(model), tokenizer, a.sentences)
    print(f"{len(a.sentences)} embeddings of {e.shape[1]} values")
    sims = e @ e.T
    for i, s in enumerate(a.sentences):
        print(" ".join(f"{x:6.3f}" for x in sims[i]), " ", s)


if __name__ == "__main__":
    main()
