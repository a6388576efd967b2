// The strict JSON reader (json_reader.h).
//
// How it stays fast: RapidJSON's SAX reader builds the document through a thin handler (one
// compare per event when no tap is attached); in-situ parsing keeps strings in the caller's
// buffer; the byte check runs 32 bytes at a time over printable ASCII.
//
// How it stays safe on hostile text: the handler refuses a 65th level before the reader
// recurses into it, so neither the stack nor the tree grows with hostile nesting; texts over
// kMaxJsonBytes are refused before they are read; every byte is checked up front for what
// strict RFC 8259 JSON forbids anywhere (FindTextFault); without kParseStopWhenDoneFlag the
// reader refuses anything but whitespace after the root value.
#include "state/json_reader.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rapidjson/error/en.h"
#include "rapidjson/memorystream.h"
#include "rapidjson/reader.h"
#include "rapidjson/stream.h"

namespace gse {
namespace {

using rapidjson::SizeType;

// Notes ListIdentities while the parser runs: watches the keys and values at the depths of
// root.<key>.items[i].metadata.{name,resourceVersion} (depths as DepthLimitedHandler counts
// them: the root object is 1, the List 2, its items array 3, an item 4, its metadata 5), and
// counts what DecodeNodeIdentity would find repeated or of the wrong type.
class IdentityTap {
 public:
  explicit IdentityTap(ListIdentities* out) : out_(out) {}

  // A key of the object at `depth`.
  void Key(int depth, absl::string_view key) {
    pending_ = kNothing;
    if (depth == 1) {
      if (key != out_->key) return;
      if (list_seen_) out_->usable = false;  // which one the document keeps is not ours to say
      list_seen_ = true;
      pending_ = kList;
    } else if (depth == 2 && in_list_) {
      if (key != "items") return;
      if (items_seen_) out_->usable = false;
      items_seen_ = true;
      pending_ = kItems;
    } else if (depth == 4 && in_item_) {
      // GetSections' keys: each at most once; spec and status objects (or null).
      static constexpr absl::string_view kSections[] = {"metadata", "spec", "status"};
      for (int k = 0; k < 3; ++k) {
        if (key != kSections[k]) continue;
        if (section_count_[k]++ > 0) item().complete = false;
        pending_ = k == 0 ? kMetadata : kSection;
      }
    } else if (depth == 5 && in_metadata_) {
      // DecodeMeta's keys: each at most once.
      static constexpr absl::string_view kMeta[] = {
          "name", "namespace", "uid", "resourceVersion", "labels", "annotations",
          "deletionTimestamp"};
      for (int k = 0; k < 7; ++k) {
        if (key != kMeta[k]) continue;
        if (meta_count_[k]++ > 0) item().complete = false;
        if (k == 0) pending_ = kName;
        if (k == 3) pending_ = kResourceVersion;
      }
    }
  }

  // A value (its first event) in the container at `depth`.
  void Value(int depth, bool is_object, bool is_array, bool is_null, const char* s, size_t n,
             bool is_string) {
    const Pending pending = pending_;
    pending_ = kNothing;
    switch (pending) {
      case kList:
        starts_list_ = is_object;
        return;
      case kItems:
        starts_items_ = is_array;
        return;
      case kMetadata:
        if (is_object) {
          starts_metadata_ = true;
        } else {
          item().complete = false;  // null is "missing", anything else the wrong type
        }
        return;
      case kSection:
        if (!is_object && !is_null) item().complete = false;
        return;
      case kName:
        if (is_string) {
          item().name = absl::string_view(s, n);
          has_name_ = true;
        } else {
          item().complete = false;
        }
        return;
      case kResourceVersion:
        if (is_string) {
          item().resource_version = absl::string_view(s, n);
        } else if (!is_null) {
          item().complete = false;
        }
        return;
      case kNothing:
        break;
    }
    if (depth == 3 && in_items_) {  // an item
      out_->items.emplace_back();
      item().complete = is_object;
      starts_item_ = is_object;
      section_count_[0] = section_count_[1] = section_count_[2] = 0;
      for (int& c : meta_count_) c = 0;
      has_name_ = false;
    }
  }

  // The container just opened at `depth` (after a Value that started it).
  void Opened(int depth) {
    if (starts_list_ && depth == 2) in_list_ = true;
    if (starts_items_ && depth == 3) in_items_ = true;
    if (starts_item_ && depth == 4) in_item_ = true;
    if (starts_metadata_ && depth == 5) in_metadata_ = true;
    starts_list_ = starts_items_ = starts_item_ = starts_metadata_ = false;
  }

  // The container at `depth` closed.
  void Closed(int depth) {
    if (depth == 5 && in_metadata_) in_metadata_ = false;
    if (depth == 4 && in_item_) {
      in_item_ = false;
      // One metadata object with one name string: what DecodeNodeIdentity requires.
      if (section_count_[0] != 1 || !has_name_) item().complete = false;
    }
    if (depth == 3 && in_items_) in_items_ = false;
    if (depth == 2 && in_list_) in_list_ = false;
  }

 private:
  enum Pending { kNothing, kList, kItems, kMetadata, kSection, kName, kResourceVersion };
  ListIdentities::Item& item() { return out_->items.back(); }

  ListIdentities* const out_;
  Pending pending_ = kNothing;
  bool list_seen_ = false, items_seen_ = false;
  bool starts_list_ = false, starts_items_ = false, starts_item_ = false, starts_metadata_ = false;
  bool in_list_ = false, in_items_ = false, in_item_ = false, in_metadata_ = false;
  int section_count_[3] = {};
  int meta_count_[7] = {};
  bool has_name_ = false;
};

// Forwards SAX events to the document under construction, refusing to nest deeper than
// kMaxJsonDepth; diverts the top-level member that `list` names (when given) into that list,
// and shows the rest to `tap` (when given). Returning false makes the reader stop with
// kParseErrorTermination.
class DepthLimitedHandler {
 public:
  // `escapes`: the text holds a backslash. Without one no string can hold a character that
  // JSON must escape ('"' and '\\' only arrive escaped, raw control characters are refused),
  // so list elements need no check, and no string can hold an unpaired surrogate.
  // `length`: of the text, to size the list once (an element takes at least 3 bytes, a node
  // name with its quotes and comma usually 8 or more).
  DepthLimitedHandler(rapidjson::Document& doc, StringListMember* list, bool escapes,
                      size_t length, IdentityTap* tap)
      : doc_(doc), list_(list), escapes_(escapes), length_(length), tap_(tap) {}

  bool too_deep() const { return too_deep_; }
  bool unpaired_surrogate() const { return unpaired_surrogate_; }

  bool Null() { return Diverted() ? Take(kNull) : (Note(kNull) && doc_.Null()); }
  bool Bool(bool b) { return Diverted() ? Take(kBoolean) : (Note(kBoolean) && doc_.Bool(b)); }
  bool Int(int i) { return Diverted() ? Take(kNumber) : (Note(kNumber) && doc_.Int(i)); }
  bool Uint(unsigned u) { return Diverted() ? Take(kNumber) : (Note(kNumber) && doc_.Uint(u)); }
  bool Int64(int64_t i) { return Diverted() ? Take(kNumber) : (Note(kNumber) && doc_.Int64(i)); }
  bool Uint64(uint64_t u) {
    return Diverted() ? Take(kNumber) : (Note(kNumber) && doc_.Uint64(u));
  }
  bool Double(double d) { return Diverted() ? Take(kNumber) : (Note(kNumber) && doc_.Double(d)); }
  bool RawNumber(const char* s, SizeType n, bool copy) {
    return Diverted() ? Take(kNumber) : (Note(kNumber) && doc_.RawNumber(s, n, copy));
  }
  bool String(const char* s, SizeType n, bool copy) {
    if (!Character(s, n)) return false;
    if (list_state_ == kInList) return Collect(s, n);
    if (Diverted()) return Take(kString);
    if (tap_ != nullptr) tap_->Value(depth_, false, false, false, s, n, true);
    return doc_.String(s, n, copy);
  }
  bool Key(const char* s, SizeType n, bool copy) {
    if (!Character(s, n)) return false;
    if (tap_ != nullptr) tap_->Key(depth_, absl::string_view(s, n));
    if (list_ != nullptr && depth_ == 1 && absl::string_view(s, n) == list_->key) {
      if (list_seen_) return Fail(absl::StrCat(list_->key, ": given twice"));
      list_seen_ = true;
      list_state_ = kAwaitValue;
      ++diverted_members_;
      return true;
    }
    return doc_.Key(s, n, copy);
  }
  bool StartObject() {
    if (Diverted()) return Enter() && Take(kObject);
    if (!Note(kObject) || !Enter()) return false;
    if (tap_ != nullptr) tap_->Opened(depth_);
    return doc_.StartObject();
  }
  bool EndObject(SizeType members) {
    if (tap_ != nullptr) tap_->Closed(depth_);
    if (--depth_ == 0) members -= diverted_members_;  // the root: its diverted member left out
    return doc_.EndObject(members);
  }
  bool StartArray() {
    if (!Enter()) return false;
    if (list_state_ == kAwaitValue) {
      list_state_ = kInList;
      list_->present = true;
      list_->values.reserve(std::min<size_t>(length_ / 8, size_t{1} << 16));
      return true;
    }
    if (Diverted()) return Take(kArray);
    // (Enter() has counted this array already: the tap hears of it at its container's depth.)
    if (tap_ != nullptr) {
      tap_->Value(depth_ - 1, false, true, false, nullptr, 0, false);
      tap_->Opened(depth_);
    }
    return doc_.StartArray();
  }
  bool EndArray(SizeType elements) {
    if (tap_ != nullptr && list_state_ != kInList) tap_->Closed(depth_);
    --depth_;
    if (list_state_ == kInList && depth_ == 1) {
      list_state_ = kDone;
      return true;
    }
    return doc_.EndArray(elements);
  }

 private:
  enum ListState { kNone, kAwaitValue, kInList, kDone };
  enum EventType { kNull, kBoolean, kNumber, kString, kObject, kArray };

  // Whether the next value belongs to the list member (the common case costs one compare).
  bool Diverted() const { return list_state_ == kAwaitValue || list_state_ == kInList; }

  // Tells the identity tap of a value other than a string (always true: never stops).
  bool Note(EventType t) {
    if (tap_ != nullptr) {
      tap_->Value(depth_, t == kObject, t == kArray, t == kNull, nullptr, 0, false);
    }
    return true;
  }

  // A value of the list member other than an element string: null ends it (as absent),
  // anything else is an error.
  bool Take(EventType t) {
    static constexpr const char* kNames[] = {"null",   "boolean", "number",
                                             "string", "object",  "array"};
    if (list_state_ == kAwaitValue) {
      if (t == kNull) {
        list_state_ = kDone;
        return true;
      }
      return Fail(
          absl::StrCat(list_->key, ": must be an array of strings or null, got ", kNames[t]));
    }
    return Fail(absl::StrCat(list_->key, "[", list_->values.size(), "]: must be a string, got ",
                             kNames[t]));
  }

  bool Collect(const char* s, SizeType n) {
    if (n == 0) return Fail(absl::StrCat(list_->key, "[", list_->values.size(), "]: empty"));
    if (n > list_->max_bytes) {
      return Fail(absl::StrCat(list_->key, "[", list_->values.size(), "]: longer than ",
                               list_->max_bytes, " bytes"));
    }
    list_->values.emplace_back(s, n);
    if (escapes_) list_->plain = list_->plain && !NeedsJsonEscaping(absl::string_view(s, n));
    return true;
  }

  bool Fail(std::string message) {
    list_->error = absl::InvalidArgumentError(std::move(message));
    return false;
  }

  // RapidJSON decodes a "\\uDC00" escape that follows no high surrogate into the 3-byte form
  // of the surrogate code point (ED B0 80), which is not UTF-8: a name holding it would be
  // written back out (/debug/state, logs, annotations) as invalid text. Such a string names
  // no character, so the document is refused. Only an escape can produce these bytes (raw
  // text was checked as UTF-8 first).
  bool Character(const char* s, SizeType n) {
    if (!escapes_) return true;
    for (SizeType i = 0; i + 1 < n; ++i) {
      if (static_cast<unsigned char>(s[i]) == 0xED && static_cast<unsigned char>(s[i + 1]) >= 0xA0) {
        unpaired_surrogate_ = true;
        return false;
      }
    }
    return true;
  }

  bool Enter() {
    if (++depth_ > kMaxJsonDepth) {
      too_deep_ = true;
      return false;
    }
    return true;
  }

  rapidjson::Document& doc_;
  StringListMember* const list_;
  const bool escapes_;
  const size_t length_;
  IdentityTap* const tap_;
  int depth_ = 0;
  bool too_deep_ = false;
  bool unpaired_surrogate_ = false;
  ListState list_state_ = kNone;
  bool list_seen_ = false;
  SizeType diverted_members_ = 0;
};

// The number of any byte of `word` below `n` (n <= 0x80) is nonzero, exactly.
inline uint64_t BytesBelow(uint64_t word, uint64_t n) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  return (word - kOnes * n) & ~word & (kOnes * 0x80);
}

inline bool WordNeedsEscaping(uint64_t word) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  return (BytesBelow(word, 0x20) | BytesBelow(word ^ (kOnes * '"'), 1) |
          BytesBelow(word ^ (kOnes * '\\'), 1)) != 0;
}

// Nonzero when some byte of `word` lies outside printable ASCII (below 0x20 or above 0x7F).
// Exact for "every byte printable": a borrow only crosses out of a byte below 0x20, which
// is flagged itself.
inline uint64_t NonPrintableAscii(uint64_t word) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  return ((word - kOnes * 0x20) | word) & (kOnes * 0x80);
}

// "invalid JSON at offset N: <what>", the form of every parse error here.
absl::Status InvalidJsonAt(size_t offset, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid JSON at offset ", offset, ": ", what));
}

absl::Status TextFaultError(const TextFault& bad) {
  switch (bad.kind) {
    case TextFault::kInvalidUtf8:
      return InvalidJsonAt(bad.offset, "Invalid UTF-8 encoding.");
    case TextFault::kNul:
      return InvalidJsonAt(bad.offset, "NUL byte in the document");
    case TextFault::kControl:
      return InvalidJsonAt(
          bad.offset, absl::StrFormat("Unescaped control character U+%04X.", bad.byte));
    case TextFault::kNone:
      break;
  }
  return absl::OkStatus();
}

template <unsigned kFlags, typename Stream>
absl::Status ParseStreamLimited(const char* text, Stream& stream, size_t length,
                                rapidjson::Document& doc, StringListMember* list = nullptr,
                                ListIdentities* identities = nullptr) {
  // Every byte first (FindTextFault): the reader alone would let U+001A..U+001F through
  // inside strings (RapidJSON 1.1's SSE2 string scan tests byte <= 0x19 where it means
  // byte < 0x20), and it reads a NUL byte as the end of the text.
  if (const TextFault bad = FindTextFault(absl::string_view(text, length));
      bad.kind != TextFault::kNone) {
    doc.SetNull();
    return TextFaultError(bad);
  }
  // The recursive reader (faster than kParseIterativeFlag): the handler refuses a 65th level
  // in StartObject/StartArray, before the reader recurses into it, so hostile nesting cannot
  // grow the stack beyond kMaxJsonDepth frames.
  constexpr unsigned kLimitedFlags = kFlags;
  rapidjson::Reader reader;
  rapidjson::ParseResult result;
  bool too_deep = false;
  bool unpaired_surrogate = false;
  auto generator = [&](rapidjson::Document& target) {
    std::optional<IdentityTap> tap;
    if (identities != nullptr) tap.emplace(identities);
    DepthLimitedHandler handler(target, list, std::memchr(text, '\\', length) != nullptr, length,
                                tap ? &*tap : nullptr);
    result = reader.Parse<kLimitedFlags>(stream, handler);
    too_deep = handler.too_deep();
    unpaired_surrogate = handler.unpaired_surrogate();
    return !result.IsError();
  };
  doc.SetNull();
  doc.Populate(generator);
  if (list != nullptr && !list->error.ok()) {
    doc.SetNull();
    return list->error;
  }
  if (unpaired_surrogate) {
    doc.SetNull();
    // The reader has read the whole string when it hands it over: point at its end.
    return InvalidJsonAt(result.Offset() > 0 ? result.Offset() - 1 : 0,
                         "a \\u escape of an unpaired UTF-16 surrogate (names no character)");
  }
  if (too_deep) {
    // The reader has taken the refused '[' or '{' when it asks the handler: point at it.
    const size_t offset = result.Offset() > 0 ? result.Offset() - 1 : 0;
    return absl::InvalidArgumentError(absl::StrCat("JSON nested deeper than ", kMaxJsonDepth,
                                                   " levels at offset ", offset));
  }
  if (result.IsError()) {
    // A tab, LF or CR inside a string (FindTextFault lets them pass as whitespace): the
    // reader stops at it and calls it an escape error; name the character instead (in-situ
    // parsing writes only below the reader's position, so the byte is still there).
    const size_t at = result.Offset();
    if (result.Code() == rapidjson::kParseErrorStringEscapeInvalid && at < length &&
        static_cast<unsigned char>(text[at]) < 0x20) {
      return TextFaultError({TextFault::kControl, at, static_cast<unsigned char>(text[at])});
    }
    return InvalidJsonAt(at, rapidjson::GetParseError_En(result.Code()));
  }
  // Without kParseStopWhenDoneFlag the reader refuses anything but whitespace after the root
  // ("The document root must not be followed by other values."), and it reads up to a NUL
  // byte, which FindTextFault has refused: the whole text was read.
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJsonSize(size_t length) {
  if (length > kMaxJsonBytes) {
    return absl::InvalidArgumentError(absl::StrCat("JSON body of ", length,
                                                   " bytes exceeds the limit of ",
                                                   kMaxJsonBytes, " bytes"));
  }
  return absl::OkStatus();
}

TextFault FindTextFault(absl::string_view text) {
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t length = text.size();
  size_t i = 0;
  while (i < length) {
    // Printable ASCII 32 bytes at a time (one test per block), then 8.
    if (i + 32 <= length) {
      uint64_t w[4];
      std::memcpy(w, bytes + i, sizeof w);
      if ((NonPrintableAscii(w[0]) | NonPrintableAscii(w[1]) | NonPrintableAscii(w[2]) |
           NonPrintableAscii(w[3])) == 0) {
        i += 32;
        continue;
      }
    }
    if (i + 8 <= length) {
      uint64_t word;
      std::memcpy(&word, bytes + i, sizeof word);
      if (NonPrintableAscii(word) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char lead = bytes[i];
    if (lead < 0x20) {
      if (lead == '\t' || lead == '\n' || lead == '\r') {
        ++i;
        continue;
      }
      return {lead == 0 ? TextFault::kNul : TextFault::kControl, i, lead};
    }
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t tail;   // continuation bytes that must follow
    uint32_t cp;   // code point being assembled
    uint32_t min;  // smallest code point this length may encode (no overlong forms)
    if ((lead & 0xE0) == 0xC0) {
      tail = 1;
      cp = lead & 0x1F;
      min = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      tail = 2;
      cp = lead & 0x0F;
      min = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      tail = 3;
      cp = lead & 0x07;
      min = 0x10000;
    } else {
      return {TextFault::kInvalidUtf8, i};  // a continuation byte without a lead, or 0xF8..0xFF
    }
    if (length - i <= tail) return {TextFault::kInvalidUtf8, i};
    for (size_t k = 1; k <= tail; ++k) {
      const unsigned char b = bytes[i + k];
      if ((b & 0xC0) != 0x80) return {TextFault::kInvalidUtf8, i};
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {TextFault::kInvalidUtf8, i};
    i += tail + 1;
  }
  return {};
}

absl::Status ParseJsonLimited(absl::string_view text, rapidjson::Document& doc) {
  if (absl::Status s = CheckJsonSize(text.size()); !s.ok()) {
    doc.SetNull();
    return s;
  }
  // MemoryStream is bounded by the length (string_view need not be NUL-terminated) and, unlike
  // EncodedInputStream, does not skip a byte-order mark, which JSON does not allow.
  rapidjson::MemoryStream stream(text.data(), text.size());
  return ParseStreamLimited<rapidjson::kParseNoFlags>(text.data(), stream, text.size(), doc);
}

bool NeedsJsonEscaping(absl::string_view s) {
  if (s.size() < 8) {
    return std::any_of(s.begin(), s.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20 || c == '"' || c == '\\';
    });
  }
  uint64_t word;
  for (size_t i = 0; i + 8 <= s.size(); i += 8) {
    std::memcpy(&word, s.data() + i, sizeof word);
    if (WordNeedsEscaping(word)) return true;
  }
  // The last 8 bytes, overlapping what the loop read: covers a tail shorter than a word.
  std::memcpy(&word, s.data() + s.size() - 8, sizeof word);
  return WordNeedsEscaping(word);
}

absl::Status ParseJsonInSituLimited(char* buffer, size_t length, rapidjson::Document& doc,
                                    StringListMember* list, ListIdentities* identities) {
  if (absl::Status s = CheckJsonSize(length); !s.ok()) {
    doc.SetNull();
    return s;
  }
  if (buffer == nullptr || buffer[length] != '\0') {
    doc.SetNull();
    return absl::InvalidArgumentError("in-situ JSON buffer is not NUL-terminated");
  }
  rapidjson::InsituStringStream stream(buffer);
  return ParseStreamLimited<rapidjson::kParseInsituFlag>(buffer, stream, length, doc, list,
                                                        identities);
}

}  // namespace gse
