// libFuzzer target for the tokenizer (built by tools/fuzz/run.sh).
//
// The first byte picks what runs on the rest:
//   0: the rest as a tokenizer.json (NUL splits off a tokenizer_config.json): it loads or throws
//      inkling::Error, and a loaded tokenizer encodes and decodes a fixed text without crashing;
//   1: the rest as text through Inkling's own tokenizer (data/tokenizer.json): valid UTF-8 round
//      trips, decode(encode(x)) == x with and without special-token parsing; invalid UTF-8 is an
//      inkling::Error;
//   2: the rest as token ids (2 bytes each): decode and the incremental decoder agree.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"
#include "tensor/error.h"
#include "fuzz_util.h"

namespace {

using inkling::fuzz::check;

using inkling::Tokenizer;

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

void load(const std::string& rest) {
  size_t nul = rest.find('\0');
  std::string tokenizer_json = rest.substr(0, nul);
  std::string config_json = nul == std::string::npos ? std::string() : rest.substr(nul + 1);
  try {
    Tokenizer t = Tokenizer::from_json(tokenizer_json, config_json);
    std::vector<int32_t> ids = t.encode("Hello, world! <|message_user|> 12345 héllo");
    (void)t.decode(ids);
  } catch (const inkling::Error&) {
  }
}

void round_trip(const std::string& text) {
  const Tokenizer& t = inkling::fuzz::inkling_tokenizer();
  if (!valid_utf8(text)) {
    try {
      t.encode(text);
    } catch (const inkling::Error&) {
      return;
    }
    check(false, "invalid UTF-8 was encoded without an error");
  }
  for (bool special : {true, false}) {
    std::vector<int32_t> ids = t.encode(text, special);
    check(t.decode(ids) == text, "decode(encode(x)) != x");
  }
}

void ids_to_text(const uint8_t* data, size_t size) {
  const Tokenizer& t = inkling::fuzz::inkling_tokenizer();
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2) ids.push_back(int32_t(data[i] | (data[i + 1] << 8)) * 4 % t.vocab_size());
  std::string whole;
  try {
    whole = t.decode(ids);
  } catch (const inkling::Error&) {
    return;  // an id the vocab does not hold (a gap): decode refuses it by name
  }
  inkling::IncrementalDecoder decoder(t);
  std::string streamed;
  for (int32_t id : ids) streamed += decoder.push(id);
  streamed += decoder.flush();
  check(streamed == whole, "incremental decoding differs from decode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: load(rest); break;
    case 1: round_trip(rest); break;
    default: ids_to_text(data + 1, size - 1); break;
  }
  return 0;
}
