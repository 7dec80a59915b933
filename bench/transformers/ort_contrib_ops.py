#!/usr/bin/env python3
"""ONNX Runtime's transformer operators (domain com.microsoft, as its
transformer optimizer writes them) in small random graphs, one per form each
operator takes: imported with no flags, run by `softneuro run`, and compared
with ONNX Runtime's CPU kernels on the same file and inputs.

    bench/.venv/bin/python bench/transformers/ort_contrib_ops.py --cli build/softneuro --out /tmp/contrib

Prints one line per case; exits 1 if any output is off by more than 1e-5 of its largest value.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from hf_models import run_cli

TOL = 1e-5
F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
rng = np.random.default_rng(0)


def model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                          [onnx.numpy_helper.from_array(v, n) for n, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def ms(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain="com.microsoft", **attrs)


def randn(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def cases():
    B, S, H, N = 2, 5, 16, 4
    x = randn(B, S, H)
    gamma, beta, bias = randn(H), randn(H), randn(H)
    # SkipLayerNormalization: with and without beta and bias, the sum as an output.
    for name, ins in (("skip_ln", ["x", "skip", "gamma", "beta", "bias"]), ("skip_ln_nobias", ["x", "skip", "gamma", "beta"]),
                      ("skip_ln_gamma_only", ["x", "skip", "gamma"])):
        yield name, model([ms("SkipLayerNormalization", ins, ["y", "", "", "sum"], epsilon=1e-5)],
                          [("x", F, [B, S, H]), ("skip", F, [B, S, H])], [("y", F), ("sum", F)],
                          {"gamma": gamma, "beta": beta, "bias": bias}), {"x": x, "skip": randn(B, S, H)}
    yield "skip_simplified", model([ms("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"], ["y", "", "", "sum"])],
                                   [("x", F, [B, S, H]), ("skip", F, [B, S, H])], [("y", F), ("sum", F)],
                                   {"gamma": gamma, "bias": bias}), {"x": x, "skip": randn(B, S, H)}
    yield "simplified_ln", model([helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["y"], epsilon=1e-6)],
                                 [("x", F, [B, S, H])], [("y", F)], {"gamma": gamma}), {"x": x}
    for op, ins in (("BiasGelu", ["x", "bias"]), ("FastGelu", ["x", "bias"]), ("FastGelu", ["x"]), ("Gelu", ["x"]),
                    ("QuickGelu", ["x"])):
        yield f"{op}_{len(ins)}", model([ms(op, ins, ["y"])], [("x", F, [B, S, H])], [("y", F)], {"bias": bias}), {"x": x * 3}
    yield "QuickGelu_alpha", model([ms("QuickGelu", ["x"], ["y"], alpha=1.0)], [("x", F, [B, S, H])], [("y", F)], {}), {"x": x}
    for ta, tb, alpha in ((0, 1, 1.0), (1, 0, 0.5), (1, 1, 2.0)):
        a, b = randn(3, 6, 7) if not ta else randn(3, 7, 6), randn(7, 4) if not tb else randn(4, 7)
        yield f"fused_matmul_{ta}{tb}", model([ms("FusedMatMul", ["a", "b"], ["y"], transA=ta, transB=tb, alpha=alpha)],
                                             [("a", F, list(a.shape))], [("y", F)], {"b": b}), {"a": a}
    # EmbedLayerNormalization: with segments and mask, without (DistilBERT), with position ids.
    V, P = 50, 32
    ids = rng.integers(0, V, (B, S)).astype(np.int32)
    seg = rng.integers(0, 2, (B, S)).astype(np.int32)
    mask = np.ones((B, S), np.int32)
    mask[1, 3:] = 0
    mask[0, 1] = 2  # not counted: only ones are
    emb = {"word": randn(V, H), "pos": randn(P, H), "segemb": randn(2, H), "gamma": gamma, "beta": beta}
    yield "embed_ln", model([ms("EmbedLayerNormalization", ["ids", "seg", "word", "pos", "segemb", "gamma", "beta", "mask"],
                                ["y", "mask_index", "sum"], epsilon=1e-12)],
                            [("ids", I32, [B, S]), ("seg", I32, [B, S]), ("mask", I32, [B, S])],
                            [("y", F), ("mask_index", I32), ("sum", F)], emb), {"ids": ids, "seg": seg, "mask": mask}
    yield "embed_ln_nomask", model([ms("EmbedLayerNormalization", ["ids", "", "word", "pos", "", "gamma", "beta"], ["y", "mask_index"])],
                                   [("ids", I32, [B, S])], [("y", F), ("mask_index", I32)], emb), {"ids": ids}
    pos_ids = rng.integers(0, P, (1, S)).astype(np.int32)
    yield "embed_ln_positions", model([ms("EmbedLayerNormalization", ["ids", "", "word", "pos", "", "gamma", "beta", "", "pids"],
                                          ["y", "mask_index"])],
                                      [("ids", I32, [B, S]), ("pids", I32, [1, S])], [("y", F), ("mask_index", I32)], emb), {"ids": ids, "pids": pos_ids}
    # Attention: the mask forms, causal, past, attention_bias, unequal V size, computed weights.
    W, Wb = randn(H, 3 * H, scale=0.5), randn(3 * H)
    lengths = np.array([S, 3], np.int32)
    ends_starts = np.array([S, 4, 0, 2], np.int32)
    raw = mask.copy()
    raw[0, 1] = 1
    raw3 = (rng.random((B, S, S)) > 0.3).astype(np.int32)
    raw3[:, :, 0] = 1
    for tag, m in (("none", None), ("lengths", lengths), ("ends_starts", ends_starts), ("raw", raw), ("raw3", raw3),
                   ("dummy", np.ones((B, 1), np.int32)), ("all_masked", np.array([0, 3], np.int32))):
        for uni in (0, 1):
            ins, feeds, types = ["x", "W", "Wb"], {"x": x}, [("x", F, [B, S, H])]
            if m is not None:
                ins.append("m")
                feeds["m"] = m
                types.append(("m", I32, list(m.shape)))
            yield f"attention_{tag}_uni{uni}", model([ms("Attention", ins, ["y"], num_heads=N, unidirectional=uni)], types, [("y", F)],
                                                     {"W": W, "Wb": Wb}), feeds
    yield "attention_filter_lowest", model([ms("Attention", ["x", "W", "Wb", "m"], ["y"], num_heads=N,
                                               mask_filter_value=float(np.finfo(np.float32).min))],
                                           [("x", F, [B, S, H]), ("m", I32, [B])], [("y", F)], {"W": W, "Wb": Wb}), {"x": x, "m": lengths}
    Pl = 3
    past = randn(2, B, N, Pl, H // N)
    yield "attention_past", model([ms("Attention", ["x", "W", "Wb", "m", "past"], ["y", "present"], num_heads=N, unidirectional=1)],
                                  [("x", F, [B, S, H]), ("m", I32, [B, Pl + S]), ("past", F, [2, B, N, Pl, H // N])],
                                  [("y", F), ("present", F)], {"W": W, "Wb": Wb}),\
        {"x": x, "m": np.concatenate([np.ones((B, Pl), np.int32), raw], 1), "past": past}
    yield "attention_past_one_token", model([ms("Attention", ["x", "W", "Wb", "", "past"], ["y", "present"], num_heads=N, unidirectional=1)],
                                            [("x", F, [B, 1, H]), ("past", F, [2, B, N, Pl, H // N])],
                                            [("y", F), ("present", F)], {"W": W, "Wb": Wb}), {"x": x[:, :1], "past": past}
    yield "attention_bias_input", model([ms("Attention", ["x", "W", "Wb", "m", "", "ab"], ["y"], num_heads=N, scale=0.3)],
                                        [("x", F, [B, S, H]), ("m", I32, [B]), ("ab", F, [1, N, S, S])], [("y", F)], {"W": W, "Wb": Wb}),\
        {"x": x, "m": lengths, "ab": randn(1, N, S, S)}
    W2 = randn(H, 2 * H + 8, scale=0.5)
    yield "attention_qkv_sizes", model([ms("Attention", ["x", "W2"], ["y"], num_heads=N, qkv_hidden_sizes=[H, H, 8])],
                                       [("x", F, [B, S, H])], [("y", F)], {"W2": W2}), {"x": x}
    yield "attention_runtime_weights", model([ms("Attention", ["x", "W", "Wb"], ["y"], num_heads=N)],
                                             [("x", F, [B, S, H]), ("W", F, [H, 3 * H]), ("Wb", F, [3 * H])], [("y", F)], {}),\
        {"x": x, "W": W, "Wb": Wb}
    # MultiHeadAttention: separate Q, K, V with bias and cache; K and V in heads (cross attention).
    L = 7
    q, k, v = randn(B, S, H), randn(B, L, H), randn(B, L, H)
    mb = randn(3 * H)
    kpm = np.ones((B, L), np.int32)
    kpm[1, 5:] = 0
    yield "mha_qkv", model([ms("MultiHeadAttention", ["q", "k", "v", "b", "kpm"], ["y"], num_heads=N)],
                           [("q", F, [B, S, H]), ("k", F, [B, L, H]), ("v", F, [B, L, H]), ("kpm", I32, [B, L])], [("y", F)], {"b": mb}),\
        {"q": q, "k": k, "v": v, "kpm": kpm}
    yield "mha_lengths_bias", model([ms("MultiHeadAttention", ["q", "k", "v", "", "kpm", "ab"], ["y", "", "", "qk"], num_heads=N)],
                                    [("q", F, [B, S, H]), ("k", F, [B, L, H]), ("v", F, [B, L, H]), ("kpm", I32, [B]),
                                     ("ab", F, [B, 1, S, L])], [("y", F), ("qk", F)], {}),\
        {"q": q, "k": k, "v": v, "kpm": np.array([L, 4], np.int32), "ab": randn(B, 1, S, L)}
    pk, pv = randn(B, N, Pl, H // N), randn(B, N, Pl, H // N)
    yield "mha_past_causal", model([ms("MultiHeadAttention", ["q", "k", "v", "b", "", "", "pk", "pv"], ["y", "present_k", "present_v"],
                                      num_heads=N, unidirectional=1)],
                                   [("q", F, [B, S, H]), ("k", F, [B, S, H]), ("v", F, [B, S, H]), ("pk", F, [B, N, Pl, H // N]),
                                    ("pv", F, [B, N, Pl, H // N])], [("y", F), ("present_k", F), ("present_v", F)], {"b": mb}),\
        {"q": q, "k": randn(B, S, H), "v": randn(B, S, H), "pk": pk, "pv": pv}
    k4, v4 = randn(B, N, L, H // N), randn(B, N, L, H // N)
    yield "mha_kv_in_heads", model([ms("MultiHeadAttention", ["q", "k", "v", "b", "kpm"], ["y", "present_k", "present_v"], num_heads=N)],
                                   [("q", F, [B, S, H]), ("k", F, [B, N, L, H // N]), ("v", F, [B, N, L, H // N]), ("kpm", I32, [B, L])],
                                   [("y", F), ("present_k", F), ("present_v", F)], {"b": mb}),\
        {"q": q, "k": k4, "v": v4, "kpm": kpm}

    # GroupQueryAttention (onnxruntime-genai's decoders): 4 query heads over 2 KV heads of 16, the cache
    # right-padded per batch row (seqlens_k: valid keys after the step, minus 1), rotary from cos/sin caches.
    N, NKV, HD, MC = 4, 2, 16, 64
    cos_cache, sin_cache = [np.cos(np.outer(np.arange(MC), 1.0 / 10000 ** (np.arange(0, 8) / 8))).astype(np.float32),
                            np.sin(np.outer(np.arange(MC), 1.0 / 10000 ** (np.arange(0, 8) / 8))).astype(np.float32)]

    def gqa(name, S, P, lengths, rotary=0, interleaved=0, packed=False, positions=None, **attrs):
        B = len(lengths)
        ins, types, feeds = [], [], {}
        if packed:
            ins += ["qkv", "", ""]
            feeds["qkv"] = randn(B, S, (N + 2 * NKV) * HD)
            types.append(("qkv", F, [B, S, (N + 2 * NKV) * HD]))
        else:
            ins += ["q", "k", "v"]
            feeds.update(q=randn(B, S, N * HD), k=randn(B, S, NKV * HD), v=randn(B, S, NKV * HD))
            types += [("q", F, [B, S, N * HD]), ("k", F, [B, S, NKV * HD]), ("v", F, [B, S, NKV * HD])]
        if P:
            ins += ["pk", "pv"]
            feeds.update(pk=randn(B, NKV, P, HD), pv=randn(B, NKV, P, HD))
            types += [("pk", F, [B, NKV, P, HD]), ("pv", F, [B, NKV, P, HD])]
        else:
            ins += ["", ""]
        ins += ["seqlens_k", "total"]
        feeds["seqlens_k"] = np.array(lengths, np.int32) - 1
        types.append(("seqlens_k", I32, [B]))
        inits = {"total": np.array(max(lengths), np.int32)}
        if rotary:
            ins += ["cos", "sin"]
            inits.update(cos=cos_cache, sin=sin_cache)
        if positions is not None:
            ins += ["pos"]
            feeds["pos"] = positions
            types.append(("pos", I64, list(positions.shape)))
        node = ms("GroupQueryAttention", ins, ["y", "present_k", "present_v"], num_heads=N, kv_num_heads=NKV,
                  do_rotary=rotary, rotary_interleaved=interleaved, **attrs)
        return name, model([node], types, [("y", F), ("present_k", F), ("present_v", F)], inits), feeds

    yield gqa("gqa_prompt", 5, 0, [5, 5])
    yield gqa("gqa_prompt_padded_rotary", 5, 0, [5, 3], rotary=1)
    yield gqa("gqa_prompt_interleaved", 5, 0, [5, 2], rotary=1, interleaved=1)
    yield gqa("gqa_decode_rotary", 1, 6, [7, 7], rotary=1)
    yield gqa("gqa_decode_ragged", 1, 6, [7, 4], rotary=1)
    yield gqa("gqa_chunk", 3, 4, [7], rotary=1)
    yield gqa("gqa_window_softcap", 1, 6, [7, 5], local_window_size=3, softcap=2.0)
    yield gqa("gqa_packed", 4, 0, [4, 3], rotary=1, packed=True)
    yield gqa("gqa_scale_noncausal", 4, 0, [4, 4], scale=0.2, causal=0)
    yield gqa("gqa_prompt_position_ids", 5, 0, [5, 5], rotary=1, positions=np.array([[7, 9, 9, 9, 9], [3, 0, 0, 0, 0]], np.int64))
    yield gqa("gqa_decode_position_ids", 1, 6, [7, 5], rotary=1, positions=np.array([[20], [11]], np.int64))
    # onnxruntime-genai's model builder: seqlens_k and total_sequence_length from the attention mask.
    B, S, P = 1, 3, 5
    nodes = [helper.make_node("ReduceSum", ["mask", "one"], ["len64"], keepdims=0),
             helper.make_node("Sub", ["len64", "one"], ["last64"]),
             helper.make_node("Cast", ["last64"], ["seqlens_k"], to=I32),
             helper.make_node("Shape", ["mask"], ["mshape"]),
             helper.make_node("Gather", ["mshape", "one"], ["total64"], axis=0),
             helper.make_node("Cast", ["total64"], ["total"], to=I32),
             ms("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens_k", "total", "cos", "sin"],
                ["y", "present_k", "present_v"], num_heads=N, kv_num_heads=NKV, do_rotary=1)]
    yield "gqa_builder_mask", model(nodes, [("q", F, [B, S, N * HD]), ("k", F, [B, S, NKV * HD]), ("v", F, [B, S, NKV * HD]),
                                            ("pk", F, [B, NKV, P, HD]), ("pv", F, [B, NKV, P, HD]), ("mask", I64, [B, P + S])],
                                    [("y", F), ("present_k", F), ("present_v", F)],
                                    {"one": np.array([1], np.int64), "cos": cos_cache, "sin": sin_cache}),\
        {"q": randn(B, S, N * HD), "k": randn(B, S, NKV * HD), "v": randn(B, S, NKV * HD), "pk": randn(B, NKV, P, HD),
         "pv": randn(B, NKV, P, HD), "mask": np.ones((B, P + S), np.int64)}
    # RotaryEmbedding (com.microsoft): 3-D and 4-D input, an offset or per-token positions, partial rotation.
    x3, x4 = randn(2, 5, N * HD), randn(2, N, 5, HD)
    for tag, x, pos, attrs in (("3d_offset", x3, np.array([3], np.int64), {"num_heads": N}),
                               ("3d_positions", x3, rng.integers(0, MC, (2, 5)).astype(np.int64), {"interleaved": 1}),
                               ("4d", x4, rng.integers(0, MC, (2, 5)).astype(np.int64), {}),
                               ("partial", x3, np.array([0], np.int64), {"num_heads": N, "rotary_embedding_dim": 8})):
        c, sn = (cos_cache, sin_cache) if tag != "partial" else (cos_cache[:, :4], sin_cache[:, :4])
        yield f"rotary_{tag}", model([ms("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], **attrs)],
                                     [("x", F, list(x.shape)), ("pos", I64, list(pos.shape))], [("y", F)],
                                     {"cos": c, "sin": sn}), {"x": x, "pos": pos}
    # MatMulNBits: 4-bit (with and without zero points, a bias), 8-bit, a K that is not a multiple of the block.
    for bits, K, Nn, block, zp, bias_on in ((4, 64, 24, 32, True, True), (4, 40, 8, 16, False, False), (8, 32, 8, 16, True, False),
                                            (2, 64, 8, 32, True, False)):
        blocks = (K + block - 1) // block
        q = rng.integers(0, 2 ** bits, (Nn, blocks, block)).astype(np.uint8)
        per = 8 // bits
        packed_b = np.zeros((Nn, blocks, block * bits // 8), np.uint8)
        for i in range(per):
            packed_b |= (q[:, :, i::per] << (bits * i)).astype(np.uint8)
        scales = (rng.random((Nn, blocks)) * 0.1 + 0.01).astype(np.float32)
        ins, inits = ["a", "B", "scales"], {"B": packed_b, "scales": scales}
        if zp:
            z = rng.integers(0, 2 ** bits, (Nn, blocks)).astype(np.uint8)
            zbytes = (blocks * bits + 7) // 8
            zpacked = np.zeros((Nn, zbytes), np.uint8)
            for blk in range(blocks):
                zpacked[:, blk * bits // 8] |= (z[:, blk] << ((blk * bits) % 8)).astype(np.uint8)
            ins.append("zp")
            inits["zp"] = zpacked
        if bias_on:
            ins += [""] * (4 - len(ins)) + ["", "bias"]
            inits["bias"] = randn(Nn)
        a = randn(2, 3, K)
        yield f"matmul_{bits}bits_K{K}", model([ms("MatMulNBits", ins, ["y"], K=K, N=Nn, bits=bits, block_size=block)],
                                               [("a", F, [2, 3, K])], [("y", F)], inits), {"a": a}

    # GatherBlockQuantized: an embedding's codes (uint8 packed, packed zero points or the default), 2-, 4- and 8-bit;
    # negative ids from the end.
    for bits, zp_on in ((4, True), (4, False), (8, True), (2, True)):
        V, D, block = 20, 64, 32
        per = 8 // bits
        q = rng.integers(0, 2 ** bits, (V, D)).astype(np.uint8)
        data = np.zeros((V, D // per), np.uint8)
        for i in range(per):
            data |= (q[:, i::per] << (bits * i)).astype(np.uint8)
        ins, inits = ["data", "ids", "scales"], {"data": data, "scales": randn(V, D // block, scale=0.05)}
        if zp_on:
            z = rng.integers(0, 2 ** bits, (V, D // block)).astype(np.uint8)
            zpacked = np.zeros((V, ((D // block) * bits + 7) // 8), np.uint8)
            for blk in range(D // block):
                zpacked[:, blk * bits // 8] |= (z[:, blk] << ((blk * bits) % 8)).astype(np.uint8)
            ins.append("zp")
            inits["zp"] = zpacked
        ids = rng.integers(-V, V, (2, 5)).astype(np.int64)
        yield (f"gather_block_quantized_{bits}bits{'_zp' if zp_on else ''}",
               model([ms("GatherBlockQuantized", ins, ["y"], bits=bits, block_size=block, gather_axis=0, quantize_axis=1)],
                     [("ids", I64, [2, 5])], [("y", F)], inits), {"ids": ids})

    # FusedConv and FusedGemm (ONNX Runtime's saved optimized files): each activation, Z added before it.
    xc = randn(1, 4, 9, 9)
    wc, bc = randn(6, 4, 3, 3, scale=0.3), randn(6)
    for act, params in (("Relu", []), ("LeakyRelu", [0.2]), ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.25, 0.4]),
                        ("Sigmoid", []), ("Tanh", [])):
        extra = {"activation_params": params} if params else {}
        yield f"fused_conv_{act}", model([ms("FusedConv", ["x", "w", "b"], ["y"], activation=act, pads=[1, 1, 1, 1], strides=[1, 1],
                                            **extra)],
                                         [("x", F, [1, 4, 9, 9])], [("y", F)], {"w": wc, "b": bc}), {"x": xc}
    yield "fused_conv_z", model([ms("FusedConv", ["x", "w", "b", "z"], ["y"], activation="Relu", strides=[2, 2], group=2)],
                                [("x", F, [1, 4, 9, 9]), ("z", F, [1, 6, 4, 4])], [("y", F)], {"w": randn(6, 2, 3, 3), "b": bc}),\
        {"x": xc, "z": randn(1, 6, 4, 4)}
    yield "fused_gemm", model([ms("FusedGemm", ["a", "b", "c"], ["y"], activation="LeakyRelu", activation_alpha=0.1, transB=1,
                                  alpha=0.5, beta=2.0)],
                              [("a", F, [3, 8])], [("y", F)], {"b": randn(5, 8), "c": randn(5)}), {"a": randn(3, 8)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/softneuro")
    ap.add_argument("--out", default="/tmp/contrib")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    import onnxruntime as ort
    ort.set_default_logger_severity(3)  # (initializers a case does not read)
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for name, m, feeds in cases():
        if a.only and a.only not in name:
            continue
        path = os.path.join(a.out, name + ".onnx")
        onnx.save(m, path)
        outs = [o.name for o in m.graph.output]
        ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(outs, feeds)
        dnn = path[:-5] + ".dnn"
        r = subprocess.run([a.cli, "import", path, "-o", dnn], capture_output=True, text=True)
        if r.returncode:
            print(f"{name}: import failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
            bad += 1
            continue
        try:
            gots = run_cli(a.cli, dnn, feeds, outs, a.out, name)
        except RuntimeError as e:
            print(f"{name}: run failed: {e}")
            bad += 1
            continue
        worst = 0.0
        for o, got, want in zip(outs, gots, ref):
            if got.shape != want.shape:
                worst = float("inf")
                print(f"{name}: {o} shape {got.shape}, ONNX Runtime {want.shape}")
                continue
            worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want)) / max(float(np.max(np.abs(want))), 1e-30)))
        ok = worst <= TOL
        bad += not ok
        print(f"{name}: {'ok' if ok else 'MISMATCH'} (largest difference {worst:.2e} of the largest value)")
    print(f"{bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
