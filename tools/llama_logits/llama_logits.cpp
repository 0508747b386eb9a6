// llama_logits: greedy continuation of a prompt of token ids through libllama's public C API
// (llama.h), printing the generated ids and writing the logits that chose each one, so
// tools/gguf_vs_llama.py can compare llama.cpp's run of a GGUF file with ours.
//
//   llama_logits MODEL.gguf IDS N LOGITS.npy [THREADS [KV [FLASH]]]
//
// IDS is comma-separated; the output mirrors `inkling generate --temp 0 --print-ids
// --logits-out`: the generated ids as one comma-separated line on stdout, and a float32 .npy of
// shape [n_generated, n_vocab] whose row i holds the logits that chose token i (the prompt's last
// position, then each generated token's). Generation stops after N tokens or at the model's EOS.
// KV is the KV cache type, f32 (the default: so the cache rounds nothing) or f16 (llama.cpp's own
// default). FLASH is llama.cpp's flash attention: auto (the default, on for CPUs), on or off; the
// Inkling branch's banded flash attention rounds Q, K and V to f16, its other path does not.
//
// Not part of inkling's build: tools/llama_logits/build.sh compiles it against a llama.cpp build.
#include <llama.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

void write_npy(const char* path, const std::vector<float>& data, size_t rows, size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  FILE* out = std::fopen(path, "wb");
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path);
    std::exit(1);
  }
  const uint16_t length = uint16_t(header.size());
  std::fwrite("\x93NUMPY\x01\x00", 1, 8, out);
  std::fwrite(&length, 2, 1, out);
  std::fwrite(header.data(), 1, header.size(), out);
  std::fwrite(data.data(), sizeof(float), data.size(), out);
  if (std::fclose(out) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path);
    std::exit(1);
  }
}

void quiet(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf IDS N LOGITS.npy [THREADS [f32|f16 [auto|on|off]]]\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> prompt;
  std::stringstream ids(argv[2]);
  for (std::string item; std::getline(ids, item, ',');) prompt.push_back(llama_token(std::atoi(item.c_str())));
  const int n = std::atoi(argv[3]);
  const int threads = argc > 5 ? std::atoi(argv[5]) : 2;
  const std::string kv = argc > 6 ? argv[6] : "f32";
  if (kv != "f32" && kv != "f16") {
    std::fprintf(stderr, "KV must be f32 or f16, got %s\n", kv.c_str());
    return 2;
  }
  const std::string flash = argc > 7 ? argv[7] : "auto";
  if (flash != "auto" && flash != "on" && flash != "off") {
    std::fprintf(stderr, "FLASH must be auto, on or off, got %s\n", flash.c_str());
    return 2;
  }
  if (prompt.empty() || n <= 0) {
    std::fprintf(stderr, "give a non-empty prompt and a positive N\n");
    return 2;
  }

  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], model_params);
  if (!model) {
    std::fprintf(stderr, "llama.cpp could not load %s\n", argv[1]);
    return 1;
  }
  llama_context_params ctx_params = llama_context_default_params();
  ctx_params.n_ctx = uint32_t(prompt.size() + size_t(n) + 8);
  ctx_params.n_batch = uint32_t(prompt.size());
  ctx_params.n_ubatch = uint32_t(prompt.size());
  ctx_params.n_threads = threads;
  ctx_params.n_threads_batch = threads;
  ctx_params.type_k = ctx_params.type_v = kv == "f32" ? GGML_TYPE_F32 : GGML_TYPE_F16;
  ctx_params.flash_attn_type = flash == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                               : flash == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                : LLAMA_FLASH_ATTN_TYPE_AUTO;
  llama_context* ctx = llama_init_from_model(model, ctx_params);
  if (!ctx) {
    std::fprintf(stderr, "llama.cpp could not make a context for %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const size_t n_vocab = size_t(llama_vocab_n_tokens(vocab));
  const llama_token eos = llama_vocab_eos(vocab);

  std::vector<float> all_logits;
  std::vector<llama_token> generated;
  llama_batch batch = llama_batch_get_one(prompt.data(), int32_t(prompt.size()));
  llama_token next = 0;
  for (int step = 0; step < n; ++step) {
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama_decode failed at step %d\n", step);
      return 1;
    }
    const float* logits = llama_get_logits_ith(ctx, -1);
    all_logits.insert(all_logits.end(), logits, logits + n_vocab);
    next = 0;
    for (size_t i = 1; i < n_vocab; ++i)
      if (logits[i] > logits[next]) next = llama_token(i);
    generated.push_back(next);
    if (next == eos) break;
    batch = llama_batch_get_one(&next, 1);
  }
  write_npy(argv[4], all_logits, generated.size(), n_vocab);
  for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? "," : "", generated[i]);
  std::printf("\n");
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
