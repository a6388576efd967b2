// The strict, limited JSON reader that every outside input goes through: extender request
// bodies, Kubernetes objects, lists and watch events, snapshots, quota files, JSON catalogs.
//
// Strict means RFC 8259 and nothing else: valid UTF-8 only; no raw control character (in a
// string or anywhere else; tab, LF and CR only as whitespace between tokens); no NUL byte;
// nothing but whitespace after the root value. Limited means the size and nesting limits
// below, checked before the text is read and before the parser nests deeper. Errors are
// InvalidArgument and name the byte offset (from 0) and the reason.
// All functions are pure and thread-safe.
#ifndef GSE_STATE_JSON_READER_H_
#define GSE_STATE_JSON_READER_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rapidjson/document.h"

namespace gse {

// Hard limits on hostile input, applied to every document.
inline constexpr size_t kMaxJsonBytes = 256u << 20;  // whole document
inline constexpr int kMaxJsonDepth = 64;             // nesting of objects/arrays

// The size limit alone ("JSON body of N bytes exceeds the limit of M bytes"), for callers
// that copy a text before they parse it.
absl::Status CheckJsonSize(size_t length);

// The first byte that strict text may not hold anywhere: a byte outside well-formed UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), a NUL byte, or
// another control character than tab, LF and CR. JSON (RFC 8259) and YAML (1.2, c-printable)
// both refuse them; the JSON reader checks this first, the catalog's YAML reader too.
struct TextFault {
  enum Kind { kNone, kInvalidUtf8, kControl, kNul };
  Kind kind = kNone;
  size_t offset = 0;       // of the offending byte (or of the sequence it starts)
  unsigned char byte = 0;  // kControl: which character (U+0001..U+001F)
};
TextFault FindTextFault(absl::string_view text);

// Parses `text`, strict and limited as above. Errors read "invalid JSON at offset N: <reason>",
// e.g.
//   invalid JSON at offset 57: Unescaped control character U+001A.
//   invalid JSON at offset 3: The document root must not be followed by other values.
// or "JSON nested deeper than 64 levels at offset N". On error `doc` is null. This overload
// copies the strings into `doc`.
absl::Status ParseJsonLimited(absl::string_view text, rapidjson::Document& doc);

// A member of the top-level object that is an array of strings (or null), collected while
// parsing instead of stored in the document: kube-scheduler's 5,000-name candidate list then
// costs no DOM values and no second walk over them. The member is left out of the document.
// Each element is checked as it arrives; the first bad one stops the parse with `error` set
// to an InvalidArgument that names it ("NodeNames[3]: must be a string, got number"), as do
// a value that is neither an array nor null and a second occurrence of the key.
struct StringListMember {
  explicit StringListMember(absl::string_view k, size_t max) : key(k), max_bytes(max) {}
  const absl::string_view key;
  const size_t max_bytes;  // longest element allowed; empty elements are refused too
  bool present = false;    // the member was given with an array (absent and null: false)
  std::vector<absl::string_view> values;  // views into the parsed buffer
  // No element holds a character that JSON must escape: each can be written back between
  // quotes as it is (NeedsJsonEscaping, checked only when the text holds a backslash).
  bool plain = true;
  absl::Status error;
};

// The identities (metadata.name, metadata.resourceVersion) of the items of a List-valued
// top-level member (kube-scheduler's "Nodes"), noted while parsing, as views into the buffer:
// by the time a decoder walks 5,000 parsed Node objects they have left the caches, and
// finding two strings in each then costs more than the parse. Nothing is validated here;
// DecodeNodeIdentity uses an item's capture only when it shows that the item passes the same
// checks (one metadata object, one name string, no repeated key it reads) and decodes the
// item itself otherwise, so results and errors are the same either way.
struct ListIdentities {
  explicit ListIdentities(absl::string_view k) : key(k) {}
  const absl::string_view key;  // the top-level member holding {"items":[...]}
  struct Item {
    absl::string_view name;
    absl::string_view resource_version;
    bool complete = false;  // the capture alone decides this item's identity
  };
  // Parallel to the member's items, when `usable` (the member and its items given once).
  std::vector<Item> items;
  bool usable = true;
};

// Whether `s` holds a character that a JSON string must escape (a control character, '"' or
// '\\'), 8 bytes at a time.
bool NeedsJsonEscaping(absl::string_view s);

// In-situ variant, equally strict: parses `buffer` in place (about twice as fast on big
// bodies); `buffer` must be NUL-terminated and outlive `doc`. With `list`, that member is
// collected on the way (its `error`, when set, is the returned status). With `identities`,
// those are noted too.
absl::Status ParseJsonInSituLimited(char* buffer, size_t length, rapidjson::Document& doc,
                                    StringListMember* list = nullptr,
                                    ListIdentities* identities = nullptr);

}  // namespace gse

#endif  // GSE_STATE_JSON_READER_H_
