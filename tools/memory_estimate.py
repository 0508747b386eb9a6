#!/usr/bin/env python3
"""Text-decoder parameters and weight bytes per release layout, from the published text_config
values (shared spec notes). Prints the README's "memory per layout" table.

Counted: embed + unembed, per layer q/k/v/r/o projections (global or sliding head counts), the
dense SwiGLU of the first dense_mlp_idx layers, and per MoE layer the router, the routed and the
shared experts (3 matrices of hidden x width each). Norms, convolutions and the bias projection
are under 0.01% and left out, and so are the vision / audio / MTP towers (the loader skips them).
Bytes: bf16 = 2 per parameter; 4-bit formats = 4.5 bits (NVFP4: an E4M3 scale per 16 values;
MLX affine: a bf16 scale and bias per 64). What each release quantizes: NVFP4 the routed experts
of every MoE layer but the first; MLX 4-bit ("experts_only") the routed, shared and dense MLPs.
"""

MODELS = {
    "Inkling-Small": dict(hidden=4096, layers=42, heads=32, kv=8, swa_heads=32, swa_kv=8,
                          global_layers=[5, 11, 17, 23, 29, 35, 41], dense_layers=2,
                          dense_width=16384, moe_width=2048, routed=256, active=6, shared=2),
    "Inkling": dict(hidden=6144, layers=66, heads=64, kv=8, swa_heads=64, swa_kv=16,
                    global_layers=[i for i in range(66) if (i + 1) % 6 == 0], dense_layers=2,
                    dense_width=24576, moe_width=3072, routed=256, active=6, shared=2),
}
HEAD_DIM, D_REL, VOCAB = 128, 16, 201024
FOUR_BIT = 4.5 / 8  # bytes per parameter


def count(m):
    h = m["hidden"]
    parts = dict(embed=2 * VOCAB * h, attention=0, dense=0, router=0, routed=0, routed_first=0, shared=0)
    active = VOCAB * h  # unembed (the embedding is a lookup)
    first_moe = True
    for i in range(m["layers"]):
        glob = i in m["global_layers"]
        heads, kv = (m["heads"], m["kv"]) if glob else (m["swa_heads"], m["swa_kv"])
        attn = 2 * heads * HEAD_DIM * h + 2 * kv * HEAD_DIM * h + heads * D_REL * h
        parts["attention"] += attn
        active += attn
        if i < m["dense_layers"]:
            parts["dense"] += 3 * h * m["dense_width"]
            active += 3 * h * m["dense_width"]
            continue
        expert = 3 * h * m["moe_width"]
        parts["router"] += (m["routed"] + m["shared"]) * h
        parts["routed_first" if first_moe else "routed"] += m["routed"] * expert
        parts["shared"] += m["shared"] * expert
        active += (m["active"] + m["shared"]) * expert + (m["routed"] + m["shared"]) * h
        first_moe = False
    return parts, active


for name, m in MODELS.items():
    p, active = count(m)
    total = sum(p.values())
    bf16 = 2 * total
    nvfp4 = FOUR_BIT * p["routed"] + 2 * (total - p["routed"])
    mlx = FOUR_BIT * (p["routed"] + p["routed_first"] + p["shared"] + p["dense"]) + 2 * (
        p["embed"] + p["attention"] + p["router"])
    print(f"{name}: {total / 1e9:.1f}B text parameters, {active / 1e9:.1f}B active per token; "
          f"weights bf16 {bf16 / 1e9:.0f} GB, NVFP4 {nvfp4 / 1e9:.0f} GB, MLX 4-bit {mlx / 1e9:.0f} GB")
