// Inkling from a GGUF file as llama.cpp's Inkling converter writes it (convert_hf_to_gguf.py,
// conversion/inkling.py): the config from the `inkling.*` metadata, the tensors bound by their
// GGUF names into the same ModelWeights every other layout fills (Checkpoint::open does it).
//
// The converter's layout, checkpoint name -> GGUF name (GGUF dims are ggml's order, reversed
// here to the row-major shapes the binder checks):
//   embed / unembed / embed_norm / norm      token_embd, output, token_embd_norm, output_norm
//   attn.w{q,k,v,r,o}                        blk.N.attn_{q,k,v,r,output}        [out, in]
//   attn.{q,k}_norm, rel_logits_proj.proj    attn_{q,k}_norm, attn_rel_proj (F32, [d_rel, R])
//   {attn,mlp}_norm                          attn_norm, ffn_norm
//   attn.{k,v}_sconv, {attn,mlp}_sconv       shortconv_{k,v,attn,mlp} (F32, [C, K]: the [C, 1, K] taps)
//   dense mlp.w13_dn / w2_md                 ffn_gate (even rows of w13), ffn_up (odd rows), ffn_down
//   mlp.gate.weight / .bias, global_scale    ffn_gate_inp ([routed + shared, H]), exp_probs_b.bias, ffn_gscale
//   experts.w13_weight / w2_weight           ffn_{gate,up}_exps ([E, I, H]), ffn_down_exps ([E, H, I])
//   shared_experts.shared_w13 / w2           ffn_{gate,up}_shexp ([SH, I, H]), ffn_down_shexp
#pragma once

#include <filesystem>

#include "io/gguf.h"
#include "model/config.h"

namespace inkling {

// The config of a GGUF Inkling model from its metadata (the first file of a split set). Throws
// naming the file and key for a missing, mistyped or inconsistent key.
ModelConfig model_config_from_gguf(const GgufFile& file);

// What a -m argument names, for either kind of checkpoint.
// The directory of its side files (tokenizer.json, tokenizer_config.json, generation_config.json,
// the chat template): the argument itself when it is a directory, else the GGUF file's directory.
std::filesystem::path checkpoint_side_dir(const std::filesystem::path& model);
// config.json of a checkpoint directory, or a GGUF model's metadata.
ModelConfig load_checkpoint_config(const std::filesystem::path& model);

}  // namespace inkling
