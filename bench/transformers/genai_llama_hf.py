#!/usr/bin/env python3
"""The Hugging Face folder genai_decode.py's model is built from: a LLaMA of TinyLlama-1.1B's widths
(hidden 2048, MLP 5632, 32 heads over 4 key/value heads, vocab 32000) with LAYERS layers, seeded
weights, and a word-level tokenizer (onnxruntime-genai's builder copies one; nothing is downloaded).

    python bench/transformers/genai_llama_hf.py OUT_HF [LAYERS]        # (a venv with torch, transformers, tokenizers)
    python -m onnxruntime_genai.models.builder -i OUT_HF -o OUT -p int4 -e cpu
"""
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
torch.manual_seed(0)
config = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=4,
                     num_hidden_layers=layers, vocab_size=32000, max_position_embeddings=2048, rms_norm_eps=1e-5,
                     bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
model = LlamaForCausalLM(config).eval()
model.save_pretrained(out)
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 32000)}}
tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(out)
print(f"wrote {out}: {layers} layers")
