// The GBNF parser and the byte-level matcher.
#include <gtest/gtest.h>

#include <memory>

#include "runtime/grammar/grammar.h"
#include "runtime/grammar/matcher.h"
#include "tensor/error.h"

namespace inkling::grammar {
namespace {

std::shared_ptr<const Grammar> gbnf(std::string_view text) { return std::make_shared<Grammar>(parse_gbnf(text)); }

bool accepts(std::string_view grammar, std::string_view text) { return grammar_accepts(gbnf(grammar), text); }

// Whether `text` is a prefix of something the grammar derives.
bool prefix_ok(std::string_view grammar, std::string_view text) {
  GrammarMatcher m(gbnf(grammar), nullptr);
  return m.accept_bytes(text);
}

void expect_error(std::string_view grammar, std::string_view fragment) {
  try {
    parse_gbnf(grammar);
    ADD_FAILURE() << "no error for: " << grammar;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Gbnf, LiteralsAndAlternation) {
  const char* g = R"(root ::= "yes" | "no" | "maybe")";
  EXPECT_TRUE(accepts(g, "yes"));
  EXPECT_TRUE(accepts(g, "maybe"));
  EXPECT_FALSE(accepts(g, "ye"));
  EXPECT_FALSE(accepts(g, "yess"));
  EXPECT_TRUE(prefix_ok(g, "ma"));
  EXPECT_FALSE(prefix_ok(g, "x"));
}

TEST(Gbnf, Repetitions) {
  EXPECT_TRUE(accepts(R"(root ::= "a"*)", ""));
  EXPECT_TRUE(accepts(R"(root ::= "a"*)", "aaaa"));
  EXPECT_FALSE(accepts(R"(root ::= "a"+)", ""));
  EXPECT_TRUE(accepts(R"(root ::= "ab"+)", "ababab"));
  EXPECT_FALSE(accepts(R"(root ::= "ab"+)", "aba"));
  EXPECT_TRUE(accepts(R"(root ::= "a"? "b")", "b"));
  EXPECT_TRUE(accepts(R"(root ::= "a"? "b")", "ab"));
  EXPECT_FALSE(accepts(R"(root ::= "a"? "b")", "aab"));
  const char* counted = R"(root ::= [0-9]{2,4})";
  EXPECT_FALSE(accepts(counted, "1"));
  EXPECT_TRUE(accepts(counted, "12"));
  EXPECT_TRUE(accepts(counted, "1234"));
  EXPECT_FALSE(accepts(counted, "12345"));
  EXPECT_TRUE(accepts(R"(root ::= "x"{3})", "xxx"));
  EXPECT_FALSE(accepts(R"(root ::= "x"{3})", "xx"));
  EXPECT_TRUE(accepts(R"(root ::= "x"{2,})", "xxxxxx"));
  EXPECT_FALSE(accepts(R"(root ::= "x"{2,})", "x"));
  EXPECT_TRUE(accepts(R"(root ::= "x"{,2})", ""));
  EXPECT_FALSE(accepts(R"(root ::= "x"{,2})", "xxx"));
  EXPECT_TRUE(accepts(R"(root ::= ("ab" | "c"){2} "!")", "abc!"));
}

TEST(Gbnf, ClassesRangesNegationAndEscapes) {
  const char* g = R"(root ::= [a-cx] [^0-9\n] "\x41\u00e9\t\"\\" .)";
  EXPECT_TRUE(accepts(g, "b#A\xC3\xA9\t\"\\z"));
  EXPECT_FALSE(accepts(g, "d#A\xC3\xA9\t\"\\z"));
  EXPECT_FALSE(accepts(g, "b5A\xC3\xA9\t\"\\z"));
  EXPECT_FALSE(accepts(g, "b\nA\xC3\xA9\t\"\\z"));
  // '.' and negated classes take any code point, in whole UTF-8 sequences.
  EXPECT_TRUE(accepts(R"(root ::= .)", "\xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(R"(root ::= .)", "\xF0\x9F\x98"));
  EXPECT_TRUE(prefix_ok(R"(root ::= .)", "\xF0\x9F\x98"));
  EXPECT_FALSE(prefix_ok(R"(root ::= .)", "\x80"));
  EXPECT_FALSE(prefix_ok(R"(root ::= .)", "\xED\xA0"));  // a surrogate's encoding
  EXPECT_TRUE(accepts(R"(root ::= [α-ω]+)", "αβγ"));
  EXPECT_FALSE(accepts(R"(root ::= [α-ω]+)", "αb"));
  EXPECT_TRUE(accepts(R"(root ::= [^a]*)", "ü€😀b"));
}

TEST(Gbnf, RulesCommentsAndLines) {
  const char* g = R"(# a comment
root ::= greeting ws name   # trailing comment
greeting ::=
  "hello"
  | "hi"
ws ::= " "+
name ::= [A-Z] [a-z]*
)";
  EXPECT_TRUE(accepts(g, "hello Ann"));
  EXPECT_TRUE(accepts(g, "hi  Bo"));
  EXPECT_FALSE(accepts(g, "hi bo"));
  // A rule continues on the next line until a "name ::=" starts.
  EXPECT_TRUE(accepts("root ::= \"a\"\n  \"b\"\n", "ab"));
}

TEST(Gbnf, RecursionAndAmbiguity) {
  const char* parens = R"g(root ::= "(" root ")" | "")g";
  EXPECT_TRUE(accepts(parens, "((()))"));
  EXPECT_FALSE(accepts(parens, "(()"));
  std::string deep(500, '(');
  deep += std::string(500, ')');
  EXPECT_TRUE(accepts(parens, deep));
  // Ambiguous: every split of the a's is a parse; the state stays small.
  const char* ambiguous = R"(root ::= "a"* "a"* "b")";
  EXPECT_TRUE(accepts(ambiguous, std::string(200, 'a') + "b"));
  EXPECT_TRUE(accepts(R"(root ::= x | y
x ::= "ab" "c"
y ::= "a" "bd")", "abd"));
}

TEST(Gbnf, Errors) {
  expect_error(R"(root ::= missing)", "'missing' is used but never defined");
  expect_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
  expect_error(R"(root ::= "abc)", "unterminated string");
  expect_error(R"(root ::= [a-)", "unterminated character class");
  expect_error(R"(root ::= [z-a])", "reversed");
  expect_error(R"(root ::= "\q")", "unknown escape");
  expect_error(R"(root ::= "a"{3,1})", "n < m");
  expect_error(R"(root ::= "a"{100000})", "repetition count above");
  expect_error(R"(root ::= ( "a" )", "expected ')'");
  expect_error(R"(other ::= "a")", "no rule named 'root'");
  expect_error(R"(root ::= root "a" | "b")", "left recursion");
  expect_error("root ::= x \"a\"\nx ::= y\ny ::= \"\" | root", "left recursion");
  expect_error(R"(root ::= "a" root)", "cannot terminate");
  expect_error("root ::= x\nx ::= \"(\" x \")\"", "cannot terminate");
  expect_error(R"(root ::= <[12]>)", "token references");
  // Nesting is bounded, not a stack overflow.
  expect_error("root ::= " + std::string(5000, '(') + "\"a\"" + std::string(5000, ')'), "nested deeper");
}

TEST(Gbnf, DeadAlternativesAreDropped) {
  // x can never finish, so the matcher must not let "b" start it.
  const char* g = "root ::= \"a\" | x\nx ::= \"b\" x";
  EXPECT_TRUE(accepts(g, "a"));
  EXPECT_FALSE(prefix_ok(g, "b"));
}

TEST(Utf8Ranges, CoverExactlyTheCodePoints) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
  utf8_range_sequences(0, 0x10FFFF, seqs);
  // Counting the byte strings the sequences describe gives every scalar value once.
  uint64_t total = 0;
  for (const auto& seq : seqs) {
    uint64_t n = 1;
    for (auto [lo, hi] : seq) n *= uint64_t(hi - lo + 1);
    total += n;
  }
  EXPECT_EQ(total, 0x110000u - 0x800u);
}

// A small vocabulary where tokens span several grammar symbols and split UTF-8 characters.
std::shared_ptr<const TokenVocabulary> small_vocabulary() {
  std::vector<std::string> tokens = {"{", "}", "{\"", "\":", "\"", "a", "ab", "abc", "1", "12", "\xCE", "\xB2",
                                     "\xCE\xB2", " ", "<|special|>", "<eos>", "}\n", ""};
  std::vector<bool> special(tokens.size(), false);
  special[14] = special[15] = true;
  return std::make_shared<TokenVocabulary>(tokens, special, std::vector<int32_t>{15}, 20);
}

std::vector<int32_t> allowed(GrammarMatcher& m) {
  TokenMask mask;
  m.allowed_tokens(mask);
  return mask.ids();
}

TEST(Matcher, MaskOnSmallVocabulary) {
  auto vocab = small_vocabulary();
  GrammarMatcher m(gbnf(R"(root ::= "{\"" key "\":" [0-9]+ "}"
key ::= ("a" | "b" | "c" | "β")+)"), vocab);
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{0, 2}));  // "{" and "{\""
  ASSERT_TRUE(m.accept_token(0));
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{4}));
  ASSERT_TRUE(m.accept_token(4));
  // Key characters, including both halves of the split "β", and "abc" spanning three symbols.
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{5, 6, 7, 10, 12}));
  ASSERT_TRUE(m.accept_token(10));
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{11}));  // only the second byte of β
  ASSERT_TRUE(m.accept_token(11));
  // '"' alone is the first byte of '":'.
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{3, 4, 5, 6, 7, 10, 12}));
  EXPECT_FALSE(m.accept_token(8));
  ASSERT_TRUE(m.accept_token(3));
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{8, 9}));
  ASSERT_TRUE(m.accept_token(9));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_token(15));
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{1, 8, 9}));
  ASSERT_TRUE(m.accept_token(1));
  EXPECT_TRUE(m.can_end());
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{15}));  // only the end token; special tokens never
  EXPECT_FALSE(m.accept_token(14));
  ASSERT_TRUE(m.accept_token(15));
  EXPECT_TRUE(m.finished());
  EXPECT_TRUE(allowed(m).empty());
  // Rollback returns to earlier states, masks included.
  m.rollback(2);
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{1, 8, 9}));
  m.rollback(m.accepted_count());
  EXPECT_EQ(allowed(m), (std::vector<int32_t>{0, 2}));
}

TEST(Matcher, CopiesAreIndependent) {
  GrammarMatcher a(gbnf(R"(root ::= "ab" | "ac")"), small_vocabulary());
  ASSERT_TRUE(a.accept_bytes("a"));
  GrammarMatcher b = a;
  EXPECT_TRUE(b.accept_bytes("b"));
  EXPECT_TRUE(b.can_end());
  EXPECT_FALSE(a.can_end());
  EXPECT_TRUE(a.accept_bytes("c"));
}

}  // namespace
}  // namespace inkling::grammar
