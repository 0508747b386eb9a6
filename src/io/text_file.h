// Reads the small files beside a checkpoint (config.json, tokenizer.json, templates) and the
// files a user names on the command line. They are untrusted: a symlink to /dev/zero or a FIFO
// must not be read forever, and a 40 GB "config.json" must not be slurped into memory.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace inkling {

// Limits for the files we read whole, generous for every real checkpoint.
inline constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;     // config.json, generation_config.json
inline constexpr size_t kMaxTokenizerFileBytes = size_t{256} << 20; // tokenizer.json, tokenizer_config.json
inline constexpr size_t kMaxTemplateFileBytes = size_t{16} << 20;   // chat_template.jinja
inline constexpr size_t kMaxInputFileBytes = size_t{256} << 20;     // files named by the user

// The whole file; throws Error "<path>: ..." when it cannot be opened, is not a regular file (after
// following symlinks), or is larger than `max_bytes` (named as `what`, e.g. "a messages file";
// empty: "a " and the file's own name, e.g. "a config.json").
std::string read_text_file(const std::filesystem::path& path, size_t max_bytes, std::string_view what = {});

}  // namespace inkling
