#!/usr/bin/env python3
"""Hugging Face transformers as a new user meets them: each model built from
its config with seeded random weights, exported by torch.onnx.export (the
TorchScript exporter at opsets 17 and 20, the dynamo exporter at 18 and 23;
ortopt17: the TorchScript export passed through ONNX Runtime's transformer
optimizer, its com.microsoft operators in the file), imported with no flags, run at two sequence lengths and with a padded
attention mask, compared with ONNX Runtime on the same file and inputs, then
tuned with default options and compared again.

    python bench/transformers/hf_models.py --cli build/softneuro --out /tmp/hf \
        [--models bert,gpt2,...] [--exporters torchscript17,dynamo23] [--size base|tiny] [--no-tune]
        [--quantize-dynamic]

--quantize-dynamic: each export quantised by ONNX Runtime's quantize_dynamic (int8
weights, MatMulInteger; after ortopt17 also QAttention, QEmbedLayerNormalization)
and compared on that file within DQ_TOL (its per-tensor rounding can tie: a value
one step apart moves the output), with the count of its MatMulIntegers and
projections that run as dynamic_quant_dense layers.

Needs torch, transformers, onnx and onnxruntime (a venv of its own, see
bench/README.md). Prints one line per model, exporter and check; exits 1 if
any output is off by more than 1e-4 of the output's largest magnitude.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

TOL = 1e-4
DQ_TOL = 2e-2


def build(name, size):
    import torch
    import transformers as tf
    torch.manual_seed(0)
    tiny = size == "tiny"
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128) if tiny else {}
    if name == "bert":
        cfg = tf.BertConfig(**small, vocab_size=1000 if tiny else 30522)
        return tf.BertModel(cfg), "text"
    if name == "distilbert":
        cfg = tf.DistilBertConfig(**({"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 128, "vocab_size": 1000} if tiny else {}))
        return tf.DistilBertModel(cfg), "text"
    if name == "roberta":
        cfg = tf.RobertaConfig(**small, vocab_size=1000 if tiny else 50265)
        return tf.RobertaModel(cfg), "text"
    if name in ("gpt2", "gpt2-kv"):
        cfg = tf.GPT2Config(**({"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000} if tiny else {}))
        return tf.GPT2Model(cfg), "causal"
    if name == "t5-encoder":
        cfg = tf.T5Config(**({"d_model": 64, "num_layers": 2, "num_heads": 4, "d_ff": 128, "d_kv": 16, "vocab_size": 1000} if tiny else {}))
        return tf.T5EncoderModel(cfg), "text"
    if name == "bart-encoder":
        cfg = tf.BartConfig(**({"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                                "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "vocab_size": 1000} if tiny else {}))
        return tf.BartModel(cfg).get_encoder(), "text"
    if name == "vit":
        cfg = tf.ViTConfig(**small)
        return tf.ViTModel(cfg), "image"
    if name == "swin":  # shifted windows: masks computed from the image size
        cfg = tf.SwinConfig(**({"embed_dim": 32, "depths": [2, 2], "num_heads": [2, 4]} if tiny else {}))
        return tf.SwinModel(cfg), "image"
    if name == "whisper-encoder":
        cfg = tf.WhisperConfig(**({"d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 4, "encoder_ffn_dim": 128,
                                   "decoder_layers": 2, "decoder_attention_heads": 4, "decoder_ffn_dim": 128} if tiny else
                                  {"d_model": 384, "encoder_layers": 4, "encoder_attention_heads": 6, "encoder_ffn_dim": 1536,
                                   "decoder_layers": 4, "decoder_attention_heads": 6, "decoder_ffn_dim": 1536}))  # whisper-tiny
        return tf.WhisperModel(cfg).get_encoder(), "audio"
    # Decoder-only language models: rotary positions, RMSNorm, gated MLPs,
    # grouped-query attention (llama, mistral), ALiBi (bloom), local attention (gpt-neo).
    dec = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000)
    if name == "llama":
        return tf.LlamaModel(tf.LlamaConfig(**(dict(dec, num_key_value_heads=2) if tiny else {}))), "causal"
    if name == "mistral":
        return tf.MistralModel(tf.MistralConfig(**(dict(dec, num_key_value_heads=2, sliding_window=32) if tiny else {}))), "causal"
    if name == "phi":
        return tf.PhiModel(tf.PhiConfig(**(dec if tiny else {}))), "causal"
    if name == "falcon":
        return tf.FalconModel(tf.FalconConfig(**(dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000) if tiny else {}))), "causal"
    if name == "opt":
        return tf.OPTModel(tf.OPTConfig(**(dict(hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4, word_embed_proj_dim=64, vocab_size=1000) if tiny else {}))), "causal"
    if name == "bloom":
        return tf.BloomModel(tf.BloomConfig(**(dict(hidden_size=64, n_layer=2, n_head=4, vocab_size=1000) if tiny else {}))), "causal"
    if name == "gpt-neo":
        return tf.GPTNeoModel(tf.GPTNeoConfig(**(dict(hidden_size=64, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]], window_size=8, vocab_size=1000) if tiny else {}))), "causal"
    # Encoders with their own twists: factorised embeddings and shared layers
    # (albert), disentangled relative attention (deberta-v2), bottlenecks
    # (mobilebert), relative position buckets (mpnet), a causal text tower
    # pooled at the end-of-text token (clip-text).
    if name == "albert":
        return tf.AlbertModel(tf.AlbertConfig(**(dict(small, embedding_size=32, vocab_size=1000) if tiny else {}))), "text"
    if name == "electra":
        return tf.ElectraModel(tf.ElectraConfig(**(dict(small, embedding_size=32, vocab_size=1000) if tiny else {}))), "text"
    if name == "deberta-v2":
        return tf.DebertaV2Model(tf.DebertaV2Config(**(dict(small, vocab_size=1000) if tiny else {}))), "text"
    if name == "mobilebert":
        return tf.MobileBertModel(tf.MobileBertConfig(**(dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, intra_bottleneck_size=32, embedding_size=32, true_hidden_size=32, vocab_size=1000) if tiny else {}))), "text"
    if name == "mpnet":
        return tf.MPNetModel(tf.MPNetConfig(**(dict(small, vocab_size=1000) if tiny else {}))), "text"
    if name == "clip-text":
        return tf.CLIPTextModel(tf.CLIPTextConfig(**(dict(small, vocab_size=1000) if tiny else {}))), "text"
    if name == "clip-vision":
        return tf.CLIPVisionModel(tf.CLIPVisionConfig(**small)), "image"
    if name == "deit":
        return tf.DeiTModel(tf.DeiTConfig(**small)), "image"
    if name == "beit":  # relative position bias tables
        return tf.BeitModel(tf.BeitConfig(**small, use_relative_position_bias=True)), "image"
    if name == "convnext":
        return tf.ConvNextModel(tf.ConvNextConfig(**({"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 2, 1]} if tiny else {}))), "image"
    if name == "segformer":
        return tf.SegformerModel(tf.SegformerConfig(**({"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1], "num_attention_heads": [1, 2, 4, 8], "decoder_hidden_size": 64} if tiny else {}))), "image"
    if name == "wav2vec2":  # raw waveform: a convolutional feature encoder, group norm, a convolutional position embedding
        return tf.Wav2Vec2Model(tf.Wav2Vec2Config(**(dict(small, conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4) if tiny else {}))), "wave"
    # More decoders: partial rotary (gpt-neox, persimmon with q/k layer norms),
    # interleaved rotary (gpt-j, codegen), multi-query attention (gpt-bigcode),
    # ALiBi (mpt), sinusoidal positions (ctrl), experts routed per token (mixtral).
    if name == "gpt-neox":
        return tf.GPTNeoXModel(tf.GPTNeoXConfig(**(dict(dec, rotary_pct=0.25) if tiny else {}))), "causal"
    if name == "persimmon":
        return tf.PersimmonModel(tf.PersimmonConfig(**(dict(dec, partial_rotary_factor=0.5) if tiny else {}))), "causal"
    if name == "gpt-j":
        return tf.GPTJModel(tf.GPTJConfig(**(dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=1000) if tiny else {}))), "causal"
    if name == "codegen":
        return tf.CodeGenModel(tf.CodeGenConfig(**(dict(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, vocab_size=1000) if tiny else {}))), "causal"
    if name == "gpt-bigcode":
        return tf.GPTBigCodeModel(tf.GPTBigCodeConfig(**(dict(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, multi_query=True) if tiny else {}))), "causal"
    if name == "mpt":
        return tf.MptModel(tf.MptConfig(**(dict(d_model=64, n_heads=4, n_layers=2, vocab_size=1000) if tiny else {}))), "causal"
    if name == "ctrl":
        return tf.CTRLModel(tf.CTRLConfig(**(dict(n_embd=64, n_layer=2, n_head=4, dff=128, vocab_size=1000) if tiny else {}))), "causal"
    if name == "biogpt":
        return tf.BioGptModel(tf.BioGptConfig(**(dict(small, vocab_size=1000) if tiny else {}))), "causal"
    if name == "mixtral":
        return tf.MixtralModel(tf.MixtralConfig(**(dict(dec, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2) if tiny else {}))), "causal"
    # More encoders: grouped 1x1 convolutions (squeezebert), rotary (roformer,
    # esm), span-based dynamic convolution (convbert), relative attention
    # (xlnet, deberta), windowed attention padded to the window (longformer).
    if name == "squeezebert":
        return tf.SqueezeBertModel(tf.SqueezeBertConfig(**(dict(small, embedding_size=64, vocab_size=1000) if tiny else {}))), "text"
    if name == "roformer":
        return tf.RoFormerModel(tf.RoFormerConfig(**(dict(small, embedding_size=64, vocab_size=1000) if tiny else {}))), "text"
    if name == "esm":
        return tf.EsmModel(tf.EsmConfig(**(dict(small, vocab_size=33, pad_token_id=1, position_embedding_type="rotary") if tiny else {}))), "text"
    if name == "convbert":
        return tf.ConvBertModel(tf.ConvBertConfig(**(dict(small, embedding_size=64, vocab_size=1000) if tiny else {}))), "text"
    if name == "xlnet":
        return tf.XLNetModel(tf.XLNetConfig(**(dict(d_model=64, n_layer=2, n_head=4, d_inner=128, vocab_size=1000) if tiny else {}))), "text"
    if name == "deberta":
        return tf.DebertaModel(tf.DebertaConfig(**(dict(small, vocab_size=1000) if tiny else {}))), "text"
    if name == "longformer":
        return tf.LongformerModel(tf.LongformerConfig(**(dict(small, attention_window=[8, 8], vocab_size=1000) if tiny else {}))), "text"
    # More vision: continuous position bias (swinv2), position embeddings
    # resized bicubically to the image (dinov2, yolos), unfolded patches
    # (mobilevit), attention biases gathered by index (levit), pooling mixers
    # (poolformer), convolutional projections (cvt).
    if name == "swinv2":
        return tf.Swinv2Model(tf.Swinv2Config(**({"embed_dim": 32, "depths": [2, 2], "num_heads": [2, 4]} if tiny else {}))), "image"
    if name == "dinov2":
        return tf.Dinov2Model(tf.Dinov2Config(**small)), "image"
    if name == "yolos":
        return tf.YolosModel(tf.YolosConfig(**small, num_detection_tokens=10)), "image"
    if name == "mobilevit":
        return tf.MobileViTModel(tf.MobileViTConfig(**({"hidden_sizes": [64, 80, 96], "neck_hidden_sizes": [16, 16, 24, 48, 64, 80, 320]} if tiny else {}))), "image"
    if name == "levit":
        return tf.LevitModel(tf.LevitConfig()), "image"
    if name == "poolformer":
        return tf.PoolFormerModel(tf.PoolFormerConfig(**({"depths": [1, 1, 2, 1]} if tiny else {}))), "image"
    if name == "cvt":
        return tf.CvtModel(tf.CvtConfig(**({"depth": [1, 1, 2]} if tiny else {}))), "image"
    # More speech: gated relative position bias (wavlm), squeezed sequences (sew).
    if name == "hubert":
        return tf.HubertModel(tf.HubertConfig(**(dict(small, conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4) if tiny else {}))), "wave"
    if name == "wavlm":
        return tf.WavLMModel(tf.WavLMConfig(**(dict(small, conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4) if tiny else {}))), "wave"
    if name == "sew":
        return tf.SEWModel(tf.SEWConfig(**(dict(small, conv_dim=(32,) * 13, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4) if tiny else {}))), "wave"
    # A third round: pooled sequences (funnel), integer-only arithmetic as
    # floats (ibert), Nystrom landmarks (nystromformer), block-sparse attention
    # (big-bird), global response norm (convnextv2), focal modulation
    # (focalnet), spatial reduction attention (pvt), conformer blocks with
    # rotary positions (wav2vec2-conformer), disentangled attention over a
    # squeezed sequence (sew-d).
    if name == "funnel":
        return tf.FunnelBaseModel(tf.FunnelConfig(**(dict(d_model=64, n_head=4, d_head=16, d_inner=128, block_sizes=[1, 1], vocab_size=1000) if tiny else {}))), "text"
    if name == "ibert":
        return tf.IBertModel(tf.IBertConfig(**(dict(small, vocab_size=1000) if tiny else {}))), "text"
    if name == "nystromformer":
        return tf.NystromformerModel(tf.NystromformerConfig(**(dict(small, vocab_size=1000, num_landmarks=8, segment_means_seq_len=64) if tiny else {}))), "text"
    if name == "big-bird":
        return tf.BigBirdModel(tf.BigBirdConfig(**(dict(small, vocab_size=1000, block_size=8, num_random_blocks=2) if tiny else {}))), "text"
    if name == "rembert":
        return tf.RemBertModel(tf.RemBertConfig(**(dict(small, input_embedding_size=32, output_embedding_size=32, vocab_size=1000) if tiny else {}))), "text"
    if name == "convnextv2":
        return tf.ConvNextV2Model(tf.ConvNextV2Config(**({"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 2, 1]} if tiny else {}))), "image"
    if name == "focalnet":
        return tf.FocalNetModel(tf.FocalNetConfig(**({"embed_dim": 32, "depths": [1, 1, 2, 1]} if tiny else {}))), "image"
    if name == "pvt":
        return tf.PvtModel(tf.PvtConfig(**({"hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1], "num_attention_heads": [1, 2, 4, 8]} if tiny else {}))), "image"
    if name == "efficientformer":
        return tf.EfficientFormerModel(tf.EfficientFormerConfig()), "image"
    if name == "mobilevitv2":
        return tf.MobileViTV2Model(tf.MobileViTV2Config()), "image"
    if name == "wav2vec2-conformer":
        return tf.Wav2Vec2ConformerModel(tf.Wav2Vec2ConformerConfig(**(dict(small, conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, position_embeddings_type="rotary") if tiny else {}))), "wave"
    if name == "sew-d":
        return tf.SEWDModel(tf.SEWDConfig(**(dict(small, conv_dim=(32,) * 13) if tiny else {}))), "wave"
    if name == "data2vec-audio":
        return tf.Data2VecAudioModel(tf.Data2VecAudioConfig(**(dict(small, conv_dim=(32,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4) if tiny else {}))), "wave"
    raise SystemExit(f"unknown model {name}")


def last_hidden_of_text(model):
    """A text model as (input_ids, attention_mask) -> last_hidden_state, as exported (and as bench/gpu times it)."""
    import torch

    class M(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask)[0]
    return M(model)


# The model_type ONNX Runtime's transformer optimizer takes for each name (others: "bert", its generic encoder fusions).
ORT_MODEL_TYPES = {"gpt2": "gpt2", "vit": "vit", "deit": "vit", "bart-encoder": "bart", "whisper-encoder": "bart",
                   "t5-encoder": "t5", "clip-text": "clip", "swin": "swin"}


def export(name, size, exporter, path):
    """exporter: torchscriptNN, dynamoNN (opset NN), or ortoptNN (torchscriptNN, then ONNX Runtime's
    transformer optimizer, as Optimum's --optimize O1 runs it: com.microsoft operators)."""
    if exporter.startswith("ortopt"):
        from onnxruntime.transformers.optimizer import optimize_model
        raw = path + ".raw.onnx"
        result = export(name, size, exporter.replace("ortopt", "torchscript"), raw)
        # num_heads and hidden_size 0: detected from the graph.
        optimize_model(raw, model_type=ORT_MODEL_TYPES.get(name, "bert"), num_heads=0, hidden_size=0, opt_level=1,
                       use_gpu=False).save_model_to_file(path)
        os.remove(raw)
        return result
    import torch
    model, kind = build(name, size)
    model.eval()
    vocab = getattr(model.config, "vocab_size", 1000)
    if kind in ("text", "causal"):
        ids = torch.randint(0, vocab, (1, 16))
        mask = torch.ones(1, 16, dtype=torch.int64)
        names = ["input_ids", "attention_mask"]
        args = (ids, mask)
        dyn = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
    elif kind == "image":
        names, args = ["pixel_values"], (torch.randn(1, 3, 224, 224),)
        dyn = {"pixel_values": {0: "batch"}}

        class M(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, pixel_values):
                return self.m(pixel_values=pixel_values)[0]
    elif kind == "wave":
        names, args = ["input_values"], (torch.randn(1, 16000),)
        dyn = {"input_values": {0: "batch", 1: "samples"}}

        class M(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_values):
                return self.m(input_values)[0]
    else:
        names, args = ["input_features"], (torch.randn(1, model.config.num_mel_bins, 3000),)
        dyn = {"input_features": {0: "batch"}}

        class M(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_features):
                return self.m(input_features)[0]
    wrapped = (last_hidden_of_text(model) if kind in ("text", "causal") else M(model)).eval()
    ts = exporter.startswith("torchscript")
    opset = int(exporter.replace("torchscript", "").replace("dynamo", ""))
    with torch.no_grad():
        if ts:
            # (torch before 2.5, Debian's 1.13 among them, has no dynamo argument: TorchScript is all it exports.)
            import inspect
            legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
            torch.onnx.export(wrapped, args, path, input_names=names, output_names=["last_hidden_state"],
                              dynamic_axes={**dyn, "last_hidden_state": {0: "batch"}}, opset_version=opset, **legacy)
        else:
            shapes = {}
            for n in names:
                shapes[n] = {k: torch.export.Dim(v if v != "sequence" else "sequence", min=2, max=4096) if v == "sequence" else torch.export.Dim.AUTO
                             for k, v in dyn[n].items()}
            torch.onnx.export(wrapped, args, path, input_names=names, output_names=["last_hidden_state"],
                              dynamic_shapes=tuple(shapes[n] for n in names), opset_version=opset, dynamo=True,
                              external_data=False)
    max_len = getattr(model.config, "max_position_embeddings", None) if name == "clip-text" else None
    return kind, vocab, max_len


def quantize_dynamic_copy(path, out):
    """ONNX Runtime's quantize_dynamic of `path` (int8 weights) into `out`."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic as ort_quantize_dynamic
    ort_quantize_dynamic(path, out, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def quantize_dynamic(path):
    """`path` replaced by ONNX Runtime's quantize_dynamic of it (int8 weights); returns how many
    integer products it holds (MatMulIntegers, and QAttentions' three projections each)."""
    import onnx
    out = path + ".dq.onnx"
    quantize_dynamic_copy(path, out)
    os.replace(out, path)
    ops = [n.op_type for n in onnx.load(path, load_external_data=False).graph.node]
    return ops.count("MatMulInteger") + 3 * ops.count("QAttention")


def inputs_for(kind, vocab, seq, padded, rng):
    if kind in ("text", "causal"):
        ids = rng.integers(0, vocab, size=(1, seq), dtype=np.int64)
        mask = np.ones((1, seq), dtype=np.int64)
        if padded:
            mask[0, seq - seq // 4:] = 0
        return {"input_ids": ids, "attention_mask": mask}
    if kind == "image":
        return {"pixel_values": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    if kind == "wave":
        return {"input_values": rng.standard_normal((1, 16000 if not seq else seq * 160)).astype(np.float32)}
    return {"input_features": rng.standard_normal((1, 80, 3000)).astype(np.float32)}


def run_cli(cli, dnn, feeds, outputs, work, tag):
    """`softneuro run` of `dnn` once on `feeds` (name -> array); the arrays of `outputs`, in order.
    RuntimeError with the CLI's last line where it fails."""
    args = [cli, "run", dnn, "--repeat", "1", "--top", "0"]
    for k, v in feeds.items():
        p = os.path.join(work, f"{tag}.{k}.npy")
        np.save(p, v)
        args += ["--input", f"{k}={p}"]
    paths = [os.path.join(work, f"{tag}.out.{o}.npy") for o in outputs]
    for o, p in zip(outputs, paths):
        args += ["--output", f"{o}={p}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc {r.returncode}")
    return [np.load(p) for p in paths]


def run_ours(cli, dnn, feeds, work, tag):
    return run_cli(cli, dnn, feeds, ["last_hidden_state"], work, tag)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/softneuro")
    ap.add_argument("--out", default="/tmp/hf-models")
    ap.add_argument("--models", default="bert,distilbert,roberta,gpt2,t5-encoder,bart-encoder,vit,whisper-encoder")
    ap.add_argument("--exporters", default="torchscript17,torchscript20,dynamo18,dynamo23")
    ap.add_argument("--size", default="base", choices=["base", "tiny"])
    ap.add_argument("--lengths", default="128,77")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the .onnx and .dnn files (a base model's are ~1.5 GB)")
    ap.add_argument("--quantize-dynamic", action="store_true", help="check the export quantised by quantize_dynamic")
    a = ap.parse_args()
    import onnxruntime as ort
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    lengths = [int(x) for x in a.lengths.split(",")]
    for name in a.models.split(","):
        for exporter in a.exporters.split(","):
            tag = f"{name}.{exporter}.{a.size}" + (".dq" if a.quantize_dynamic else "")
            onnx_path = os.path.join(a.out, tag + ".onnx")
            dnn = os.path.join(a.out, tag + ".dnn")
            try:
                kind, vocab, max_len = export(name, a.size, exporter, onnx_path)
            except Exception as e:  # noqa: BLE001 - an exporter failure is reported, not ours
                print(f"{tag}: export failed: {str(e).splitlines()[0][:200]}")
                continue
            integer_products = 0
            if a.quantize_dynamic:
                integer_products = quantize_dynamic(onnx_path)
            t0 = time.time()
            r = subprocess.run([a.cli, "import", onnx_path, "-o", dnn], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{tag}: import FAILED: {r.stderr.strip()[-600:]}")
                bad += 1
                continue
            print(f"{tag}: imported with no flags in {time.time() - t0:.1f} s", flush=True)
            if a.quantize_dynamic:
                r = subprocess.run([a.cli, "inspect", dnn], capture_output=True, text=True)
                fused = sum(1 for line in r.stdout.splitlines() if " dynamic_quant_dense " in line)
                print(f"{tag}: {fused} of {integer_products} integer products as dynamic_quant_dense layers", flush=True)
            sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
            rng = np.random.default_rng(0)
            if kind in ("text", "causal"):
                cases = [(s, False) for s in lengths] + [(lengths[0], True)]
            else:  # a waveform at two lengths (seq x 160 samples); an image or spectrogram at its one size
                cases = [(0, False), (lengths[1], False)] if kind == "wave" else [(0, False)]
            files = [dnn]
            if not a.no_tune:
                tuned = os.path.join(a.out, tag + ".tuned.dnn")
                r = subprocess.run([a.cli, "tune", dnn, "-o", tuned, "--cache", "-"], capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"{tag}: tune FAILED: {r.stderr.strip()[-600:]}")
                    bad += 1
                else:
                    files.append(tuned)
            for seq, padded in cases:
                # (CLIP's text tower has 77 positions: longer inputs are not the model's.)
                seq = seq * max_len // max(lengths) if seq and max_len and max(lengths) > max_len else seq
                feeds = inputs_for(kind, vocab, seq, padded, rng)
                try:
                    ref = sess.run(None, feeds)[0]
                except Exception as e:  # noqa: BLE001 - a trace valid at some sizes only (longformer at 77)
                    print(f"{tag}: seq {seq}: ONNX Runtime refuses the file here: {str(e).splitlines()[0][:160]}")
                    continue
                for f in files:
                    what = "tuned" if f.endswith(".tuned.dnn") else "untuned"
                    label = f"seq {seq}{' padded' if padded else ''} {what}" if seq else what
                    try:
                        got = run_ours(a.cli, f, feeds, a.out, tag)
                    except RuntimeError as e:
                        print(f"{tag}: {label}: run FAILED: {e}")
                        bad += 1
                        continue
                    if got.shape != ref.shape:
                        print(f"{tag}: {label}: shape {got.shape} against {ref.shape}")
                        bad += 1
                        continue
                    err = float(np.max(np.abs(got - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
                    ok = err <= (DQ_TOL if a.quantize_dynamic else TOL)
                    bad += 0 if ok else 1
                    print(f"{tag}: {label}: max |ours - ORT| / max |ORT| = {err:.2e} {'ok' if ok else 'FAIL'}", flush=True)
            if not a.keep:
                for f in [onnx_path] + files:
                    if os.path.exists(f):
                        os.remove(f)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
