// The strict, limited JSON reader (state/json_reader.h): limits, strictness (issue 12, finding
// 7), and the parse-time taps (the collected string list). Each rule is checked through the
// copying and the in-situ parser, and through DecodeObjects where a decoder meets it first.
#include "state/json_reader.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "state/k8s_objects.h"

namespace gse {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The message of a failed parse or decode, or a marker that makes the expectation fail.
template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& result) {
  if (result.ok()) return "<decoded without error>";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(result.status().message());
}

std::string ErrorOf(const absl::Status& status) {
  if (status.ok()) return "<parsed without error>";
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  return std::string(status.message());
}

// ---------------------------------------------------------------------------------------
// Limits and strictness.

TEST(ParseLimitsTest, EmptyAndNonJson) {
  rapidjson::Document doc;
  EXPECT_EQ(ErrorOf(ParseJsonLimited("", doc)), "invalid JSON at offset 0: The document is empty.");
  EXPECT_EQ(ErrorOf(ParseJsonLimited("   ", doc)),
            "invalid JSON at offset 3: The document is empty.");
  EXPECT_EQ(ErrorOf(ParseJsonLimited("{} x", doc)),
            "invalid JSON at offset 3: The document root must not be followed by other values.");
  EXPECT_THAT(ErrorOf(ParseJsonLimited("{'a':1}", doc)), StartsWith("invalid JSON at offset 1: "));
  EXPECT_THAT(ErrorOf(ParseJsonLimited("[1,]", doc)), StartsWith("invalid JSON at offset 3: "));
  // A byte-order mark is not JSON (Go's decoder refuses it too).
  EXPECT_THAT(ErrorOf(ParseJsonLimited("\xEF\xBB\xBF{}", doc)),
              StartsWith("invalid JSON at offset 0"));
}

TEST(ParseLimitsTest, FailedParseLeavesNullDocument) {
  rapidjson::Document doc;
  ASSERT_TRUE(ParseJsonLimited(R"({"a":1})", doc).ok());
  ASSERT_TRUE(doc.IsObject());
  EXPECT_FALSE(ParseJsonLimited(R"({"a":)", doc).ok());
  EXPECT_TRUE(doc.IsNull());
}

TEST(ParseLimitsTest, NulBytes) {
  rapidjson::Document doc;
  // A raw NUL byte after the document must not end the input silently.
  const std::string trailing("{}\0{\"junk\"", 10);
  EXPECT_EQ(ErrorOf(ParseJsonLimited(trailing, doc)),
            "invalid JSON at offset 2: NUL byte in the document");
  std::string trailing_copy = trailing;
  EXPECT_EQ(ErrorOf(ParseJsonInSituLimited(trailing_copy.data(), trailing_copy.size(), doc)),
            "invalid JSON at offset 2: NUL byte in the document");
  // A raw NUL inside a string is not JSON either.
  const std::string in_string("{\"a\":\"x\0y\"}", 11);
  EXPECT_THAT(ErrorOf(ParseJsonLimited(in_string, doc)), StartsWith("invalid JSON at offset"));
  // An escaped NUL is a valid character and keeps its place.
  ASSERT_TRUE(ParseJsonLimited(R"({"a":"x\u0000y"})", doc).ok());
  EXPECT_EQ(std::string(doc["a"].GetString(), doc["a"].GetStringLength()), std::string("x\0y", 3));
}

TEST(ParseLimitsTest, InSituBufferMustBeNulTerminated) {
  char buffer[] = {'{', '}', 'x'};
  rapidjson::Document doc;
  EXPECT_EQ(ErrorOf(ParseJsonInSituLimited(buffer, 2, doc)),
            "in-situ JSON buffer is not NUL-terminated");
}

TEST(ParseLimitsTest, InvalidUtf8) {
  rapidjson::Document doc;
  EXPECT_EQ(ErrorOf(ParseJsonLimited("{\"a\":\"\xff\"}", doc)),
            "invalid JSON at offset 6: Invalid UTF-8 encoding.");
  EXPECT_EQ(ErrorOf(ParseJsonLimited("{\"a\":\"\xc0\xaf\"}", doc)),  // overlong '/'
            "invalid JSON at offset 6: Invalid UTF-8 encoding.");
  EXPECT_EQ(ErrorOf(ParseJsonLimited("{\"a\":\"\xe0\x80\xaf\"}", doc)),  // overlong, 3 bytes
            "invalid JSON at offset 6: Invalid UTF-8 encoding.");
  EXPECT_EQ(ErrorOf(ParseJsonLimited("{\"a\":\"\xed\xa0\x80\"}", doc)),  // UTF-16 surrogate
            "invalid JSON at offset 6: Invalid UTF-8 encoding.");
  EXPECT_EQ(ErrorOf(ParseJsonLimited("{\"a\":\"\xf4\x90\x80\x80\"}", doc)),  // above U+10FFFF
            "invalid JSON at offset 6: Invalid UTF-8 encoding.");
  EXPECT_EQ(ErrorOf(ParseJsonLimited("{\"a\":\"x\xe5\x90\"}", doc)),  // cut-off sequence
            "invalid JSON at offset 7: Invalid UTF-8 encoding.");
  EXPECT_EQ(ErrorOf(ParseJsonLimited("{\"a\":\"\xe5\x90", doc)),  // cut off at the very end
            "invalid JSON at offset 6: Invalid UTF-8 encoding.");
  EXPECT_EQ(ErrorOf(ParseJsonLimited("{\"\xfe\":1}", doc)),  // in a key
            "invalid JSON at offset 2: Invalid UTF-8 encoding.");
  EXPECT_THAT(ErrorOf(ParseJsonLimited(R"({"a":"\ud800"})", doc)), HasSubstr("surrogate"));
  std::string insitu = "{\"a\":\"\xff\"}";
  EXPECT_EQ(ErrorOf(ParseJsonInSituLimited(insitu.data(), insitu.size(), doc)),
            "invalid JSON at offset 6: Invalid UTF-8 encoding.");
  EXPECT_EQ(ErrorOf(DecodeObjects("{\"kind\":\"Pod\",\"metadata\":{\"name\":\"\xff\"}}")),
            "invalid JSON at offset 34: Invalid UTF-8 encoding.");

  // Well-formed sequences of every length, up to U+10FFFF, pass unchanged.
  const std::string good = "\xc3\xa9\xe5\x90\x8d\xf0\x9f\x9a\x80\xf4\x8f\xbf\xbf";
  ASSERT_TRUE(ParseJsonLimited("[\"" + good + "\"]", doc).ok());
  EXPECT_EQ(std::string(doc[0].GetString(), doc[0].GetStringLength()), good);
}

TEST(ParseLimitsTest, InvalidUtf8IsFoundAtEveryOffset) {
  // The validator skips ASCII 32 and 8 bytes at a time; a bad byte must be found wherever it
  // sits, in the first block, a later one or the tail.
  rapidjson::Document doc;
  for (size_t pos = 2; pos < 100; ++pos) {
    std::string text = "[\"" + std::string(100, 'a') + "\"]";
    text[pos] = '\x80';
    EXPECT_EQ(ErrorOf(ParseJsonLimited(text, doc)),
              absl::StrCat("invalid JSON at offset ", pos, ": Invalid UTF-8 encoding."));
    text[pos] = '\xc3';  // a lead byte followed by ASCII
    EXPECT_EQ(ErrorOf(ParseJsonLimited(text, doc)),
              absl::StrCat("invalid JSON at offset ", pos, ": Invalid UTF-8 encoding."));
  }
}

// Issue 12, finding 7: every body is strict RFC 8259 JSON. A raw control character is refused
// wherever it stands, by every entry point, with its offset: in the normal build RapidJSON's
// SSE2 string scan let U+001A..U+001F through inside strings (in-situ parsing).
TEST(StrictJsonTest, RawControlCharactersAreRefusedAtTheirOffsetEverywhere) {
  rapidjson::Document doc;
  for (int c = 1; c < 0x20; ++c) {
    const bool whitespace = c == '\t' || c == '\n' || c == '\r';
    // Keys and values, at every offset of a 100-byte string (the SIMD scan works in 16-byte
    // blocks after an unaligned head).
    for (size_t pos = 2; pos < 102; pos += whitespace ? 7 : 1) {
      std::string text = "{\"" + std::string(100, 'k') + "\":\"" + std::string(100, 'v') + "\"}";
      for (size_t at : {pos, pos + 105}) {
        std::string bad = text;
        bad[at] = static_cast<char>(c);
        const std::string want = absl::StrFormat(
            "invalid JSON at offset %d: Unescaped control character U+%04X.", at, c);
        EXPECT_EQ(ErrorOf(ParseJsonLimited(bad, doc)), want);
        std::string insitu = bad;
        EXPECT_EQ(ErrorOf(ParseJsonInSituLimited(insitu.data(), insitu.size(), doc)), want);
        EXPECT_TRUE(doc.IsNull());
      }
    }
    // Outside strings only tab, LF and CR may stand, as whitespace.
    std::string between = "{\"a\": 1}";
    between[5] = static_cast<char>(c);
    if (whitespace) {
      EXPECT_TRUE(ParseJsonLimited(between, doc).ok()) << c;
    } else {
      EXPECT_EQ(ErrorOf(ParseJsonLimited(between, doc)),
                absl::StrFormat("invalid JSON at offset 5: Unescaped control character U+%04X.",
                                c));
    }
  }
  // Escaped, every control character is a valid character of the string.
  ASSERT_TRUE(ParseJsonLimited(R"({"a\u001ab":"\t\n\u0001"})", doc).ok());
  EXPECT_TRUE(doc.HasMember("a\x1a" "b"));
  // DEL (U+007F) needs no escape (RFC 8259: unescaped = %x20-21 / %x23-5B / %x5D-10FFFF).
  EXPECT_TRUE(ParseJsonLimited("{\"a\x7f\":\"\x7f\"}", doc).ok());
  // A pretty-printed document (kubectl, snapshot files) keeps its whitespace.
  EXPECT_TRUE(ParseJsonLimited("{\r\n\t\"a\": [\n\t\t1,\n\t\t2\n\t]\r\n}\n", doc).ok());
}

TEST(StrictJsonTest, EveryDecoderRefusesControlCharactersTrailingGarbageAndBadUtf8) {
  // DecodeObjects (snapshots, API server lists) parses in place, as the extender's bodies.
  const std::string pod = R"({"kind":"Pod","metadata":{"name":"p","namespace":"n","labels":)"
                          R"({"aaaaaaaaaaaaaaaaaaaaaaaa_aaaaaaaaaaaaaaaaa":"v"}}})";
  std::string control = pod;
  const size_t at = control.find('_');
  control[at] = '\x1a';
  EXPECT_EQ(ErrorOf(DecodeObjects(control)),
            absl::StrCat("invalid JSON at offset ", at, ": Unescaped control character U+001A."));
  EXPECT_EQ(ErrorOf(DecodeObjects(pod + " {}")),
            absl::StrCat("invalid JSON at offset ", pod.size() + 1,
                         ": The document root must not be followed by other values."));
  EXPECT_EQ(ErrorOf(DecodeObjects(pod + "\n")).find("invalid JSON"), std::string::npos);
  std::string utf8 = pod;
  utf8[at] = '\xc3';
  EXPECT_EQ(ErrorOf(DecodeObjects(utf8)),
            absl::StrCat("invalid JSON at offset ", at, ": Invalid UTF-8 encoding."));
  // The collected string list refuses them in its elements too.
  rapidjson::Document doc;
  std::string names = "{\"Names\":[\"node-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\x1f\"]}";
  const size_t unit_separator = names.find('\x1f');
  StringListMember list("Names", 253);
  EXPECT_EQ(ErrorOf(ParseJsonInSituLimited(names.data(), names.size(), doc, &list)),
            absl::StrCat("invalid JSON at offset ", unit_separator,
                         ": Unescaped control character U+001F."));
  std::string trailing = "{\"Names\":[\"a\"]}]";
  StringListMember list2("Names", 253);
  EXPECT_EQ(ErrorOf(ParseJsonInSituLimited(trailing.data(), trailing.size(), doc, &list2)),
            "invalid JSON at offset 15: The document root must not be followed by other values.");
}

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// "\uDC00" without a high surrogate before it names no character; RapidJSON would decode it
// into bytes that are not UTF-8, and a name holding them would be written back out as invalid
// JSON (/debug/state; found by snapshot_fuzz). Paired surrogates are one character and pass.
TEST(StrictJsonTest, UnpairedSurrogateEscapesAreRefusedInKeysValuesAndLists) {
  rapidjson::Document doc;
  for (const char* text : {R"({"name":"a\uDC00"})", R"({"\uDFFF":1})", R"(["\uDC00x"])",
                           R"({"x":["ok","\udc00"]})"}) {
    const absl::Status s = ParseJsonLimited(text, doc);
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("unpaired UTF-16 surrogate")) << text;
    EXPECT_TRUE(doc.IsNull()) << text;
    std::string insitu = text;
    EXPECT_FALSE(ParseJsonInSituLimited(insitu.data(), insitu.size(), doc).ok()) << text;
  }
  // A lone high surrogate is RapidJSON's own error; a pair is one character (U+1F600).
  EXPECT_FALSE(ParseJsonLimited(R"({"name":"\uD83D"})", doc).ok());
  ASSERT_TRUE(ParseJsonLimited(R"({"name":"\uD83D\uDE00 \u00e9"})", doc).ok());
  EXPECT_EQ(std::string(doc["name"].GetString()), "\xF0\x9F\x98\x80 \xC3\xA9");
  // Through a decoder of outside input: refused, naming the reason.
  EXPECT_THAT(ErrorOf(DecodeObjects(R"({"kind":"NodeList","items":[{"metadata":{"name":"n\udc00"}}]})")),
              ::testing::HasSubstr("unpaired UTF-16 surrogate"));
}

TEST(ParseLimitsTest, DepthLimitIsExact) {
  rapidjson::Document doc;
  EXPECT_TRUE(ParseJsonLimited(Nested(kMaxJsonDepth), doc).ok());
  EXPECT_EQ(ErrorOf(ParseJsonLimited(Nested(kMaxJsonDepth + 1), doc)),
            "JSON nested deeper than 64 levels at offset 64");
  std::string objects;
  for (int i = 0; i < kMaxJsonDepth; ++i) objects += "{\"a\":";
  objects += "1" + std::string(kMaxJsonDepth, '}');
  EXPECT_TRUE(ParseJsonLimited(objects, doc).ok());
  EXPECT_THAT(ErrorOf(ParseJsonLimited("[" + objects + "]", doc)),
              StartsWith("JSON nested deeper than 64 levels"));
}

TEST(ParseLimitsTest, HundredThousandDeepNestingIsAnErrorNotACrash) {
  const int kDeep = 100000;
  rapidjson::Document doc;
  EXPECT_THAT(ErrorOf(ParseJsonLimited(Nested(kDeep), doc)),
              StartsWith("JSON nested deeper than 64 levels"));
  std::string unbalanced(kDeep, '[');
  EXPECT_THAT(ErrorOf(ParseJsonInSituLimited(unbalanced.data(), unbalanced.size(), doc)),
              StartsWith("JSON nested deeper than 64 levels"));
  std::string objects;
  for (int i = 0; i < kDeep; ++i) objects += "{\"a\":";
  EXPECT_THAT(ErrorOf(DecodeObjects(objects)), StartsWith("JSON nested deeper than 64 levels"));
  // Deep nesting hidden in a field we otherwise ignore is refused too.
  const std::string pod = absl::StrCat(
      R"({"kind":"Pod","metadata":{"name":"p","namespace":"n"},"x":)", Nested(kDeep), "}");
  EXPECT_THAT(ErrorOf(DecodeObjects(pod)), StartsWith("JSON nested deeper than 64 levels"));
}

// ---------------------------------------------------------------------------------------
// A top-level string list collected while parsing (kube-scheduler's NodeNames).

struct Collected {
  std::string buffer;  // parsed in place: the document's strings point into it
  absl::Status status;
  rapidjson::Document doc;
  bool present = false;
  bool plain = false;
  std::vector<std::string> values;
};

std::unique_ptr<Collected> Collect(std::string text, size_t max_bytes = 8) {
  auto c = std::make_unique<Collected>();
  c->buffer = std::move(text);
  StringListMember list("Names", max_bytes);
  c->status = ParseJsonInSituLimited(c->buffer.data(), c->buffer.size(), c->doc, &list);
  c->present = list.present;
  c->plain = list.plain;
  for (absl::string_view v : list.values) c->values.emplace_back(v);
  return c;
}

TEST(StringListMemberTest, CollectsTheTopLevelListAndLeavesTheRestInTheDocument) {
  const auto c = Collect(R"({"a":1,"Names":["n1","n\"2",  "n3"],"b":{"Names":[7]},"c":[true]})");
  ASSERT_TRUE(c->status.ok()) << c->status;
  EXPECT_TRUE(c->present);
  EXPECT_THAT(c->values, ElementsAre("n1", "n\"2", "n3"));
  // The member is gone from the document, every other member (a nested "Names" too) is there.
  ASSERT_TRUE(c->doc.IsObject());
  EXPECT_EQ(c->doc.MemberCount(), 3u);
  EXPECT_FALSE(c->doc.HasMember("Names"));
  EXPECT_EQ(c->doc["a"].GetInt(), 1);
  EXPECT_EQ(c->doc["b"]["Names"][0].GetInt(), 7);
  EXPECT_TRUE(c->doc["c"][0].GetBool());
}

TEST(StringListMemberTest, NullAbsentAndEmptyLists) {
  for (const char* text : {R"({"Names":null,"x":2})", R"({"x":2})"}) {
    const auto c = Collect(text);
    ASSERT_TRUE(c->status.ok()) << text;
    EXPECT_FALSE(c->present) << text;
    EXPECT_TRUE(c->values.empty());
    EXPECT_EQ(c->doc["x"].GetInt(), 2);
    EXPECT_EQ(c->doc.MemberCount(), 1u);
  }
  const auto empty = Collect(R"({"Names":[]})");
  ASSERT_TRUE(empty->status.ok());
  EXPECT_TRUE(empty->present);
  EXPECT_TRUE(empty->values.empty());
  // A top-level array has no members: nothing to collect, and it parses as usual.
  const auto array = Collect(R"([{"Names":["x"]}])");
  ASSERT_TRUE(array->status.ok());
  EXPECT_FALSE(array->present);
  EXPECT_EQ(array->doc[0]["Names"][0].GetString(), std::string("x"));
}

// `plain` lets writers copy the names back between quotes: it must be false whenever one
// holds a character that JSON escapes, however the text spelled it.
TEST(StringListMemberTest, PlainSaysWhetherAnyElementNeedsEscaping) {
  EXPECT_TRUE(Collect(R"({"Names":["a-1","b.2"]})")->plain);
  EXPECT_TRUE(Collect(R"({"x":"back\\slash","Names":["a","b"]})")->plain);  // elsewhere
  EXPECT_TRUE(Collect(R"({"Names":["a\/b","\u0041"]})")->plain);  // escaped, harmless
  for (const char* name : {R"(q\"q)", R"(b\\s)", R"(\u0001)", R"(n\nl)", R"(\u0000)"}) {
    const auto c = Collect(absl::StrCat(R"({"Names":["a",")", name, R"("]})"));
    ASSERT_TRUE(c->status.ok()) << name;
    EXPECT_FALSE(c->plain) << name;
  }
}


TEST(NeedsJsonEscapingTest, FindsTheCharacterAtEveryPositionAndLength) {
  for (size_t length = 1; length <= 24; ++length) {
    EXPECT_FALSE(NeedsJsonEscaping(std::string(length, 'a'))) << length;
    EXPECT_FALSE(NeedsJsonEscaping(std::string(length, '\x7f'))) << length;
    EXPECT_FALSE(NeedsJsonEscaping(std::string(length, '\xc3'))) << length;  // UTF-8 bytes
    for (size_t at = 0; at < length; ++at) {
      for (char bad : {'"', '\\', '\0', '\x1f', '\n'}) {
        std::string s(length, 'a');
        s[at] = bad;
        EXPECT_TRUE(NeedsJsonEscaping(s)) << length << " " << at << " " << int{bad};
      }
    }
  }
  EXPECT_FALSE(NeedsJsonEscaping(""));
  EXPECT_FALSE(NeedsJsonEscaping(" !#[]~"));  // the neighbours of '"' and '\\'
}

TEST(StringListMemberTest, BadElementsAreNamedAndStopTheParse) {
  const struct {
    const char* text;
    const char* error;
  } cases[] = {
      {R"({"Names":["a",7]})", "Names[1]: must be a string, got number"},
      {R"({"Names":["a","b",{"x":1}]})", "Names[2]: must be a string, got object"},
      {R"({"Names":[["a"]]})", "Names[0]: must be a string, got array"},
      {R"({"Names":[null]})", "Names[0]: must be a string, got null"},
      {R"({"Names":[false]})", "Names[0]: must be a string, got boolean"},
      {R"({"Names":["a",""]})", "Names[1]: empty"},
      {R"({"Names":["123456789"]})", "Names[0]: longer than 8 bytes"},
      {R"({"Names":{}})", "Names: must be an array of strings or null, got object"},
      {R"({"Names":"a"})", "Names: must be an array of strings or null, got string"},
      {R"({"Names":1.5})", "Names: must be an array of strings or null, got number"},
      {R"({"Names":["a"],"Names":["b"]})", "Names: given twice"},
      {R"({"Names":null,"Names":["b"]})", "Names: given twice"},
  };
  for (const auto& c : cases) {
    const auto got = Collect(c.text);
    EXPECT_EQ(ErrorOf(got->status), c.error) << c.text;
    EXPECT_TRUE(got->doc.IsNull()) << c.text;  // no half-built document to misread
  }
  // Syntax errors and limits are reported as without a list.
  EXPECT_THAT(ErrorOf(Collect(R"({"Names":["a")")->status), StartsWith("invalid JSON at offset"));
  EXPECT_THAT(ErrorOf(Collect(R"({"Names":["a"],"x":)" + Nested(kMaxJsonDepth) + "}")->status),
              StartsWith("JSON nested deeper than 64 levels"));
}

TEST(ParseLimitsTest, BodyOverTheLimitIsRefusedBeforeParsing) {
  // Allocated once: whitespace that would otherwise parse as "document empty".
  std::string body(kMaxJsonBytes + 1, ' ');
  const std::string expected = absl::StrCat(
      "JSON body of ", kMaxJsonBytes + 1, " bytes exceeds the limit of ", kMaxJsonBytes, " bytes");
  rapidjson::Document doc;
  EXPECT_EQ(ErrorOf(ParseJsonLimited(body, doc)), expected);
  EXPECT_EQ(ErrorOf(ParseJsonInSituLimited(body.data(), body.size(), doc)), expected);
  EXPECT_EQ(ErrorOf(DecodeObjects(body)), expected);
}

}  // namespace
}  // namespace gse
