#!/usr/bin/env python3
"""Independent logits reference for inkling.cpp, built on HF transformers' Inkling model.

Usage:
  python3 tools/hf_reference.py --model DIR --prompt-ids 1,2,3 -n 64 --dtype float32 \
      --out-ids ids.txt --out-logits logits.npy [--check-spec]
  python3 tools/hf_reference.py --make-test-checkpoint DIR      # tiny random original-layout checkpoint

The checkpoint DIR is in the ORIGINAL release layout (`model.llm.*` keys, row-interleaved w13, conv weights
[C,1,K]); config.json has a `text_config`. transformers' own conversion mapping for "inkling_mm_model" turns
those keys into its module names; this script additionally
  * rewrites config.json into a temporary directory (MLP-width spelling rule, tiny vision/audio towers),
  * drops model.visual.* / model.audio.* / model.mtp.* tensors (the towers are never used here),
  * re-derives every text parameter with its OWN conversion of the original layout and requires it to equal
    what from_pretrained loaded, bit for bit (fails loudly on any missing / extra / random parameter),
  * runs greedy decoding with a manual KV-cache loop (eager attention, eval, no grad, 2 torch threads).

Output: ids file = the n generated ids, comma-separated, one line. logits .npy = float32 [n, unpadded_vocab];
row i holds the logits whose argmax is generated id i (row 0 from the prompt pass, row i>=1 from the pass that
fed generated id i-1). Ties in argmax resolve to the lowest index (torch.argmax).

--check-spec: a float64 numpy implementation of the spec's forward pass (written from the seed's formulas,
no cache, one causal pass over prompt + generated[:-1]) reads the same safetensors directly and its logits are
compared with transformers' row by row.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile

import numpy as np

SKIP_PREFIXES = ("model.mtp.", "model.visual.", "model.audio.")


def skip_key(k):
    return k.startswith(SKIP_PREFIXES) or "training_args" in k or k.endswith((".input_amax", ".original_shape"))


# ----------------------------------------------------------------------------------------------------------
# checkpoint reading (original layout)
# ----------------------------------------------------------------------------------------------------------

def shard_files(model_dir):
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        return sorted(set(wm.values()))
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return ["model.safetensors"]
    raise SystemExit(f"no model.safetensors(.index.json) in {model_dir}")


def read_original_tensors(model_dir, keep=lambda k: True):
    """All tensors (as torch tensors, original dtype) whose key passes `keep`."""
    from safetensors import safe_open
    out = {}
    for fn in shard_files(model_dir):
        with safe_open(os.path.join(model_dir, fn), framework="pt") as f:
            for k in f.keys():
                if keep(k):
                    out[k] = f.get_tensor(k)
    return out


def resolve_text_config(tc):
    """Return a copy of text_config in transformers' spelling. Raises on an unresolvable MLP width."""
    tc = dict(tc)
    if tc.get("moe_intermediate_size") is not None:
        moe, dense = tc["moe_intermediate_size"], tc.get("intermediate_size")
    else:
        moe, dense = tc.get("intermediate_size"), tc.get("dense_intermediate_size")
    tc.pop("dense_intermediate_size", None)
    if moe is None:
        raise SystemExit("text_config: cannot resolve the MoE width (need moe_intermediate_size or intermediate_size)")
    tc["moe_intermediate_size"] = moe
    if dense is not None:
        tc["intermediate_size"] = dense
    elif any(layer_kinds(tc)[1]):
        raise SystemExit("text_config: dense layers present but no dense width (dense_intermediate_size)")
    else:
        tc["intermediate_size"] = moe  # unused: no dense layer
    if "sconv_kernel_size" not in tc and "conv_kernel_size" in tc:
        tc["sconv_kernel_size"] = tc["conv_kernel_size"]
    return tc


def layer_kinds(tc):
    n = tc["num_hidden_layers"]
    if tc.get("layer_types") is not None:
        sliding = [t == "hybrid_sliding" for t in tc["layer_types"]]
    elif tc.get("local_layer_ids") is not None:
        ids = set(tc["local_layer_ids"])
        sliding = [i in ids for i in range(n)]
    else:
        sliding = [(i + 1) % 6 != 0 for i in range(n)]
    if tc.get("mlp_layer_types") is not None:
        dense = [t == "dense" for t in tc["mlp_layer_types"]]
    else:
        dense = [i < tc.get("dense_mlp_idx", 0) for i in range(n)]
    return sliding, dense


# ----------------------------------------------------------------------------------------------------------
# our own original-layout -> HF-name conversion (used to verify what from_pretrained loaded)
# ----------------------------------------------------------------------------------------------------------

def own_conversion(orig):
    """Map original-layout tensors to InklingForConditionalGeneration parameter names (independent of
    transformers' conversion_mapping)."""
    out = {}
    top = {
        "model.llm.embed.weight": "model.language_model.embed_tokens.weight",
        "model.llm.embed_norm.weight": "model.language_model.embed_tokens.embed_norm.weight",
        "model.llm.norm.weight": "model.language_model.norm.weight",
        "model.llm.unembed.weight": "lm_head.weight",
    }
    simple = {
        "attn_norm.weight": "input_layernorm.weight",
        "mlp_norm.weight": "post_attention_layernorm.weight",
        "attn_sconv.weight": "attn_sconv.conv1d.weight",
        "mlp_sconv.weight": "mlp_sconv.conv1d.weight",
        "attn.wq_du.weight": "self_attn.q_proj.weight",
        "attn.wk_dv.weight": "self_attn.k_proj.weight",
        "attn.wv_dv.weight": "self_attn.v_proj.weight",
        "attn.wr_du.weight": "self_attn.r_proj.weight",
        "attn.wo_ud.weight": "self_attn.o_proj.weight",
        "attn.q_norm.weight": "self_attn.q_norm.weight",
        "attn.k_norm.weight": "self_attn.k_norm.weight",
        "attn.k_sconv.weight": "self_attn.k_sconv.conv1d.weight",
        "attn.v_sconv.weight": "self_attn.v_sconv.conv1d.weight",
        "attn.rel_logits_proj.proj": "self_attn.rel_logits_proj.proj",
        "mlp.w2_md.weight": "mlp.down_proj.weight",
        "mlp.global_scale": "mlp.global_scale",
        "mlp.gate.weight": "mlp.gate.weight",
        "mlp.gate.bias": "mlp.gate.e_score_correction_bias",
        "mlp.gate.global_scale": "mlp.gate.global_scale",
        "mlp.experts.w2_weight": "mlp.experts.down_proj",
        "mlp.shared_experts.shared_w2_weight": "mlp.shared_experts.down_proj",
    }
    import torch
    for k, t in orig.items():
        if skip_key(k):
            continue
        if k in top:
            out[top[k]] = t
            continue
        m = re.match(r"model\.llm\.layers\.(\d+)\.(.*)$", k)
        if not m:
            raise SystemExit(f"unknown checkpoint key {k}")
        p = f"model.language_model.layers.{m.group(1)}."
        rest = m.group(2)
        if rest in simple:
            out[p + simple[rest]] = t
        elif rest == "mlp.w13_dn.weight":          # [2I, H], rows interleaved gate0, up0, gate1, ...
            out[p + "mlp.gate_proj.weight"] = t[0::2].contiguous()
            out[p + "mlp.up_proj.weight"] = t[1::2].contiguous()
        elif rest == "mlp.experts.w13_weight":     # [E, 2I, H] -> gate_up_proj [E, 2I, H] = [gate; up]
            out[p + "mlp.experts.gate_up_proj"] = torch.cat([t[:, 0::2], t[:, 1::2]], dim=1).contiguous()
        elif rest == "mlp.shared_experts.shared_w13_weight":   # [S, 2I, H]
            out[p + "mlp.shared_experts.gate_proj"] = t[:, 0::2].contiguous()
            out[p + "mlp.shared_experts.up_proj"] = t[:, 1::2].contiguous()
        else:
            raise SystemExit(f"unknown checkpoint key {k}")
    return out


# ----------------------------------------------------------------------------------------------------------
# transformers model loading
# ----------------------------------------------------------------------------------------------------------

def prepare_hf_dir(model_dir, tmp):
    """Write a transformers-friendly copy of DIR into tmp: patched config, text-only shards."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if "text_config" not in cfg:
        raise SystemExit("config.json has no text_config")
    cfg["text_config"] = resolve_text_config(cfg["text_config"])
    tc = cfg["text_config"]
    # switches of the original config that transformers' Inkling does not read: it hard-wires the value
    # every release uses. Refuse a checkpoint that asks for anything else.
    hardwired = {"use_embed_norm": True, "use_sconv": True, "use_global_scale": True, "use_gate_bias": True,
                 "norm_after_topk": True, "shared_expert_sink": True, "gate_activation": "sigmoid"}
    for key, val in hardwired.items():
        if key in tc and tc[key] != val:
            raise SystemExit(f"text_config.{key}={tc[key]!r}: transformers' Inkling only implements {val!r}")
    cfg["model_type"] = "inkling_mm_model"    # transformers' conversion mapping is keyed on this
    cfg["architectures"] = ["InklingForConditionalGeneration"]
    # The towers are never run; keep them tiny so that building the model does not explode (the default
    # vision config has a 614400-wide layer). Their parameters are randomly initialised and ignored.
    cfg["vision_config"] = {"patch_size": 2, "temporal_patch_size": 2, "n_layers": 3, "num_hidden_layers": 3}
    cfg["audio_config"] = {"n_mel_bins": 1, "mel_vocab_size": 1}
    cfg.pop("mtp_config", None)
    cfg.pop("quantization_config", None)
    cfg.pop("quantization", None)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)

    from safetensors import safe_open
    from safetensors.torch import save_file
    files = shard_files(model_dir)
    weight_map = {}
    for fn in files:
        src = os.path.join(model_dir, fn)
        with safe_open(src, framework="pt") as f:
            keys = list(f.keys())
            keep = [k for k in keys if not skip_key(k)]
            if len(keep) == len(keys):
                os.symlink(os.path.abspath(src), os.path.join(tmp, fn))
            else:
                save_file({k: f.get_tensor(k) for k in keep}, os.path.join(tmp, fn), metadata={"format": "pt"})
        for k in keep:
            weight_map[k] = fn
    with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return cfg


def load_hf_model(model_dir, dtype_name):
    import torch
    from transformers import InklingForConditionalGeneration
    tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    tmp = tempfile.mkdtemp(prefix="hfref_")
    try:
        cfg = prepare_hf_dir(model_dir, tmp)
        model, info = InklingForConditionalGeneration.from_pretrained(
            tmp, dtype=tdtype, attn_implementation="eager", output_loading_info=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    model.eval()

    # ---- verification: nothing missing / unexpected / mismatched outside the ignored towers ----
    tower = ("model.vision_tower.", "model.audio_tower.")
    problems = []
    miss = sorted(k for k in info.get("missing_keys", []) if not k.startswith(tower))
    unexp = sorted(k for k in info.get("unexpected_keys", []) if not skip_key(k))
    mism = list(info.get("mismatched_keys", []))
    if miss:
        problems.append(f"missing keys (would be randomly initialised): {miss}")
    if unexp:
        problems.append(f"unexpected keys: {unexp}")
    if mism:
        problems.append(f"mismatched keys: {mism}")
    if info.get("error_msgs"):
        problems.append(f"error messages: {info['error_msgs']}")

    # ---- verification 2: every text parameter equals our own conversion of the original tensors ----
    orig = read_original_tensors(model_dir, keep=lambda k: not skip_key(k))
    mine = own_conversion(orig)
    sd = {k: v for k, v in model.state_dict().items() if not k.startswith(tower)}
    only_model = sorted(set(sd) - set(mine))
    only_mine = sorted(set(mine) - set(sd))
    if only_model:
        problems.append(f"model parameters with no checkpoint tensor: {only_model}")
    if only_mine:
        problems.append(f"checkpoint tensors with no model parameter: {only_mine}")
    for k in sorted(set(sd) & set(mine)):
        a, b = sd[k], mine[k]
        if tuple(a.shape) != tuple(b.shape):
            problems.append(f"{k}: shape {tuple(a.shape)} vs checkpoint {tuple(b.shape)}")
        elif not torch.equal(a, b.to(a.dtype)):
            problems.append(f"{k}: loaded values differ from the checkpoint "
                            f"(max |d| {(a.float() - b.float()).abs().max().item():.3g})")
    if problems:
        raise SystemExit("HF load verification FAILED:\n  " + "\n  ".join(problems))
    print(f"[hfref] loaded {len(sd)} text tensors via from_pretrained; all equal our own conversion "
          f"of the original layout (dtype {dtype_name})", file=sys.stderr)
    return model, cfg


def greedy_hf(model, prompt, n):
    import torch
    rows, ids = [], []
    with torch.no_grad():
        inp = torch.tensor([prompt], dtype=torch.long)
        cache = None
        for step in range(n):
            kw = {"use_cache": True}
            if cache is not None:
                kw["cache"] = cache
            out = model(input_ids=inp, **kw)
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            logits = out.logits[0, -1].float()
            nxt = int(torch.argmax(logits).item())
            rows.append(logits.numpy().copy())
            ids.append(nxt)
            inp = torch.tensor([[nxt]], dtype=torch.long)
    return ids, np.stack(rows).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------
# float64 numpy implementation of the spec (independent of transformers)
# ----------------------------------------------------------------------------------------------------------

class SpecModel:
    # tensors transformers keeps in float32 even when the model is loaded in bfloat16
    F32_KEPT = ("sconv.weight", "mlp.gate.bias", "mlp.gate.global_scale")

    def __init__(self, model_dir, round_weights_to=None):
        """round_weights_to="bfloat16": round the weights to bf16 first (as a bf16 model holds them), keeping
        the tensors transformers keeps in f32; the arithmetic stays float64."""
        import torch
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.tc = resolve_text_config(cfg["text_config"])
        raw = read_original_tensors(model_dir, keep=lambda k: k.startswith("model.llm."))
        if round_weights_to == "bfloat16":
            raw = {k: (v if k.endswith(self.F32_KEPT) else v.to(torch.bfloat16)) for k, v in raw.items()}
        self.w = {k: v.double().numpy() for k, v in raw.items()}
        self.sliding, self.dense = layer_kinds(self.tc)

    def W(self, k):
        return self.w["model.llm." + k]

    def rms(self, x, w):
        eps = self.tc.get("rms_norm_eps", 1e-6)
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    @staticmethod
    def sconv(u, w):
        """y = u + causal depthwise conv(u); u [T, C], w [C, 1, K] (w[:, 0, K-1] multiplies the current token)."""
        T, C = u.shape
        K = w.shape[-1]
        wk = w.reshape(C, K)
        pad = np.concatenate([np.zeros((K - 1, C)), u], axis=0)
        y = np.zeros_like(u)
        for j in range(K):
            y += pad[j:j + T] * wk[:, j]
        return u + y

    @staticmethod
    def silu(x):
        return x / (1.0 + np.exp(-x))

    def attention(self, i, x):
        tc, p = self.tc, f"layers.{i}.attn."
        sl = self.sliding[i]
        nh = tc["swa_num_attention_heads"] if sl else tc["num_attention_heads"]
        nkv = tc["swa_num_key_value_heads"] if sl else tc["num_key_value_heads"]
        d = tc["swa_head_dim"] if sl else tc["head_dim"]
        W = tc["sliding_window_size"]
        R = W if sl else tc["rel_extent"]
        T = x.shape[0]
        q = (x @ self.W(p + "wq_du.weight").T).reshape(T, nh, d)
        k = self.sconv(x @ self.W(p + "wk_dv.weight").T, self.W(p + "k_sconv.weight")).reshape(T, nkv, d)
        v = self.sconv(x @ self.W(p + "wv_dv.weight").T, self.W(p + "v_sconv.weight")).reshape(T, nkv, d)
        r = (x @ self.W(p + "wr_du.weight").T).reshape(T, nh, -1)
        P = self.W(p + "rel_logits_proj.proj")                       # [d_rel, R]
        assert P.shape[1] == R, (P.shape, R)
        q = self.rms(q, self.W(p + "q_norm.weight"))
        k = self.rms(k, self.W(p + "k_norm.weight"))
        dist = np.arange(T)[:, None] - np.arange(T)[None, :]         # [T, T] query i, key j
        masked = (dist < 0) | ((dist >= W) if sl else False)
        rl = np.einsum("ihd,dr->hir", r, P)                           # [nh, T, R]
        g = np.clip(dist, 0, R - 1)
        bias = np.take_along_axis(rl, np.broadcast_to(g, (nh, T, T)), axis=-1)
        bias = np.where(dist >= R, 0.0, bias)
        if not sl and tc.get("log_scaling_n_floor") is not None:
            qpos = np.arange(T) + 1.0
            tau = 1.0 + tc.get("log_scaling_alpha", 0.1) * np.log(np.maximum(qpos / tc["log_scaling_n_floor"], 1.0))
            q = q * tau[:, None, None]
            bias = bias * tau[None, :, None]
        rep = nh // nkv
        kk = np.repeat(k, rep, axis=1)                                 # head h uses kv head h // rep
        vv = np.repeat(v, rep, axis=1)
        s = np.einsum("ihd,jhd->hij", q, kk) / d + bias
        s = np.where(masked[None], -np.inf, s)
        s = s - s.max(-1, keepdims=True)
        pr = np.exp(s)
        pr /= pr.sum(-1, keepdims=True)
        o = np.einsum("hij,jhd->ihd", pr, vv).reshape(T, nh * d)
        return o @ self.W(p + "wo_ud.weight").T

    def dense_mlp(self, i, n):
        p = f"layers.{i}.mlp."
        w13 = self.W(p + "w13_dn.weight")
        g, u = w13[0::2], w13[1::2]
        return (self.silu(n @ g.T) * (n @ u.T)) @ self.W(p + "w2_md.weight").T * self.W(p + "global_scale")[0]

    def moe(self, i, n):
        tc, p = self.tc, f"layers.{i}.mlp."
        Rn, SH, k = tc["n_routed_experts"], tc["n_shared_experts"], tc["num_experts_per_tok"]
        logits = n @ self.W(p + "gate.weight").T                        # [T, Rn+SH]
        scores = 1.0 / (1.0 + np.exp(-logits[:, :Rn])) + self.W(p + "gate.bias")
        gs = self.W(p + "gate.global_scale")[0]
        w13 = self.W(p + "experts.w13_weight")
        w2 = self.W(p + "experts.w2_weight")
        s13 = self.W(p + "shared_experts.shared_w13_weight")
        s2 = self.W(p + "shared_experts.shared_w2_weight")
        out = np.zeros_like(n)
        for t in range(n.shape[0]):
            idx = np.argsort(-scores[t], kind="stable")[:k]
            tl = np.concatenate([logits[t, idx], logits[t, Rn:]])
            lp = -np.logaddexp(0.0, -tl)
            m = lp.max()
            wts = np.exp(lp - (m + np.log(np.exp(lp - m).sum()))) * tc["route_scale"] * gs
            y = np.zeros(n.shape[1])
            for j, e in enumerate(idx):
                a = self.silu(w13[e, 0::2] @ n[t]) * (w13[e, 1::2] @ n[t])
                y += wts[j] * (w2[e] @ a)
            for s in range(SH):
                a = self.silu(s13[s, 0::2] @ n[t]) * (s13[s, 1::2] @ n[t]) * wts[k + s]
                y += s2[s] @ a
            out[t] = y
        return out

    def forward(self, ids):
        tc = self.tc
        h = self.W("embed.weight")[np.asarray(ids)]
        if tc.get("use_embed_norm", True):
            h = self.rms(h, self.W("embed_norm.weight"))
        for i in range(tc["num_hidden_layers"]):
            p = f"layers.{i}."
            a = self.attention(i, self.rms(h, self.W(p + "attn_norm.weight")))
            h = h + self.sconv(a, self.W(p + "attn_sconv.weight"))
            nrm = self.rms(h, self.W(p + "mlp_norm.weight"))
            m = self.dense_mlp(i, nrm) if self.dense[i] else self.moe(i, nrm)
            h = h + self.sconv(m, self.W(p + "mlp_sconv.weight"))
        h = self.rms(h, self.W("norm.weight"))
        logits = (h / tc["logits_mup_width_multiplier"]) @ self.W("unembed.weight").T
        uv = tc.get("unpadded_vocab_size") or logits.shape[-1]
        return logits[:, :uv]


def check_spec(model_dir, prompt, ids, hf_logits, dtype_name):
    spec = SpecModel(model_dir, round_weights_to=dtype_name if dtype_name != "float32" else None)
    seq = list(prompt) + list(ids[:-1])
    full = spec.forward(seq)                                   # [len(seq), V]
    rows = full[len(prompt) - 1:]                              # row i chose ids[i]
    diff = np.abs(rows - hf_logits.astype(np.float64))
    per_step = diff.max(axis=1)
    spec_ids = rows.argmax(axis=1)
    # greedy agreement: does the spec, fed HF's tokens, choose the same next token at every step?
    agree = int((spec_ids == np.asarray(ids)).sum())
    srt = np.sort(rows, axis=1)
    margin = srt[:, -1] - srt[:, -2]
    print(f"[check-spec] dtype {dtype_name}: max |HF - spec(float64)| over {len(ids)} steps x {rows.shape[1]} "
          f"logits = {diff.max():.3e} (mean {diff.mean():.3e}); logit scale (std) {rows.std():.3f}")
    print(f"[check-spec] per-step max diff: first {per_step[0]:.3e}, worst step {int(per_step.argmax())} "
          f"{per_step.max():.3e}, last {per_step[-1]:.3e}")
    print(f"[check-spec] argmax agreement {agree}/{len(ids)}; smallest top-2 margin {margin.min():.3e}")
    return diff.max(), agree


# ----------------------------------------------------------------------------------------------------------
# tiny random checkpoint in the original layout
# ----------------------------------------------------------------------------------------------------------

def make_test_checkpoint(out_dir, seed=1234):
    import torch
    from safetensors.torch import save_file
    rng = np.random.default_rng(seed)
    H, L, V, UV = 64, 4, 512, 500
    nh, nkv, d, drel, R, W, K = 4, 2, 16, 4, 16, 8, 4
    Id, Im, E, k, SH = 128, 32, 8, 2, 2
    sliding = [True, True, True, False]
    dense = [True, True, False, False]
    tc = {
        "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": nh, "num_key_value_heads": nkv,
        "swa_num_attention_heads": nh, "swa_num_key_value_heads": nkv, "head_dim": d, "swa_head_dim": d,
        "d_rel": drel, "rel_extent": R, "sliding_window_size": W,
        "layer_types": ["hybrid_sliding" if s else "hybrid" for s in sliding],
        "dense_mlp_idx": 2, "intermediate_size": Id, "moe_intermediate_size": Im,
        "n_routed_experts": E, "n_shared_experts": SH, "num_experts_per_tok": k, "route_scale": 8.0,
        "logits_mup_width_multiplier": 4.0, "log_scaling_n_floor": 16, "log_scaling_alpha": 0.1,
        "rms_norm_eps": 1e-6, "vocab_size": V, "unpadded_vocab_size": UV, "sconv_kernel_size": K,
        "model_max_length": 4096,
    }
    cfg = {"architectures": ["InklingForConditionalGeneration"], "model_type": "inkling_mm_model",
           "eos_token_id": 200006, "vocab_size": V, "text_config": tc}

    def rnd(*shape, std=1.0):
        return torch.from_numpy((rng.standard_normal(shape) * std).astype(np.float32))

    def near1(n, std=0.1):
        return torch.from_numpy((1.0 + rng.standard_normal(n) * std).astype(np.float32))

    t = {}
    g = "model.llm."
    t[g + "embed.weight"] = rnd(V, H)
    t[g + "embed_norm.weight"] = near1(H)
    t[g + "norm.weight"] = near1(H)
    t[g + "unembed.weight"] = rnd(V, H, std=1.0)
    for i in range(L):
        p = f"{g}layers.{i}."
        t[p + "attn_norm.weight"] = near1(H)
        t[p + "mlp_norm.weight"] = near1(H)
        t[p + "attn_sconv.weight"] = rnd(H, 1, K, std=0.3)
        t[p + "mlp_sconv.weight"] = rnd(H, 1, K, std=0.3)
        t[p + "attn.wq_du.weight"] = rnd(nh * d, H, std=H ** -0.5)
        t[p + "attn.wk_dv.weight"] = rnd(nkv * d, H, std=H ** -0.5)
        t[p + "attn.wv_dv.weight"] = rnd(nkv * d, H, std=H ** -0.5)
        t[p + "attn.wr_du.weight"] = rnd(nh * drel, H, std=H ** -0.5)
        t[p + "attn.wo_ud.weight"] = rnd(H, nh * d, std=(nh * d) ** -0.5)
        t[p + "attn.q_norm.weight"] = near1(d, 0.3) * 2.0     # sharpen attention (scale is 1/d)
        t[p + "attn.k_norm.weight"] = near1(d, 0.3) * 2.0
        t[p + "attn.k_sconv.weight"] = rnd(nkv * d, 1, K, std=0.3)
        t[p + "attn.v_sconv.weight"] = rnd(nkv * d, 1, K, std=0.3)
        t[p + "attn.rel_logits_proj.proj"] = rnd(drel, W if sliding[i] else R, std=0.7)
        if dense[i]:
            t[p + "mlp.w13_dn.weight"] = rnd(2 * Id, H, std=H ** -0.5)
            t[p + "mlp.w2_md.weight"] = rnd(H, Id, std=Id ** -0.5)
            t[p + "mlp.global_scale"] = torch.tensor([0.8], dtype=torch.float32)
        else:
            t[p + "mlp.gate.weight"] = rnd(E + SH, H, std=H ** -0.5)
            t[p + "mlp.gate.bias"] = rnd(E, std=0.1)
            t[p + "mlp.gate.global_scale"] = torch.tensor([0.3], dtype=torch.float32)
            t[p + "mlp.experts.w13_weight"] = rnd(E, 2 * Im, H, std=H ** -0.5)
            t[p + "mlp.experts.w2_weight"] = rnd(E, H, Im, std=Im ** -0.5)
            t[p + "mlp.shared_experts.shared_w13_weight"] = rnd(SH, 2 * Im, H, std=H ** -0.5)
            t[p + "mlp.shared_experts.shared_w2_weight"] = rnd(SH, H, Im, std=Im ** -0.5)
    # tensors of the other towers / MTP head, which must be ignored
    t["model.visual.layers.linear_0.weight"] = rnd(8, 12)
    t["model.audio.encoder.weight"] = rnd(16, H)
    t["model.mtp.layers.0.attn_norm.weight"] = near1(H)

    os.makedirs(out_dir, exist_ok=True)
    keys = sorted(t)
    half = len(keys) // 2
    shards = {"model-00001-of-00002.safetensors": keys[:half], "model-00002-of-00002.safetensors": keys[half:]}
    wm = {}
    for fn, ks in shards.items():
        save_file({kk: t[kk].contiguous() for kk in ks}, os.path.join(out_dir, fn), metadata={"format": "pt"})
        wm.update({kk: fn for kk in ks})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f, indent=1)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"[hfref] wrote test checkpoint to {out_dir} ({len(keys)} tensors)", file=sys.stderr)


# ----------------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint directory (original model.llm.* layout)")
    ap.add_argument("--prompt-ids", help="comma-separated prompt token ids (no BOS is added)")
    ap.add_argument("-n", type=int, default=64, help="number of greedy tokens")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--out-ids")
    ap.add_argument("--out-logits")
    ap.add_argument("--check-spec", action="store_true",
                    help="compare against an independent float64 numpy implementation of the spec")
    ap.add_argument("--spec-tol", type=float, default=None,
                    help="with --check-spec: exit 1 if max |HF - spec| exceeds this")
    ap.add_argument("--make-test-checkpoint", metavar="DIR", help="write a tiny random original-layout checkpoint")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    if a.make_test_checkpoint:
        make_test_checkpoint(a.make_test_checkpoint)
        if not a.model:
            return
    if not a.model or not a.prompt_ids:
        ap.error("--model and --prompt-ids are required")
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    prompt = [int(x) for x in a.prompt_ids.split(",") if x.strip()]
    model, _ = load_hf_model(a.model, a.dtype)
    ids, logits = greedy_hf(model, prompt, a.n)
    print("[hfref] ids: " + ",".join(map(str, ids)), file=sys.stderr)
    if a.out_ids:
        with open(a.out_ids, "w") as f:
            f.write(",".join(map(str, ids)) + "\n")
    if a.out_logits:
        np.save(a.out_logits, logits)
    if a.check_spec:
        worst, _ = check_spec(a.model, prompt, ids, logits, a.dtype)
        if a.spec_tol is not None and worst > a.spec_tol:
            print(f"[check-spec] FAIL: {worst:.3e} > tol {a.spec_tol:.3e}")
            sys.exit(1)


if __name__ == "__main__":
    main()
