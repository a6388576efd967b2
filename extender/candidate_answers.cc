#include "extender/candidate_answers.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/k8s_objects.h"

namespace gse {
namespace {

// Fixed text copied after every name. Pieces up to kPadded bytes are copied as kPadded bytes
// (a constant-size memcpy is a few vector moves; a variable one is a library call per entry);
// the bytes beyond the piece's own are overwritten by the next write or cut off at the end.
constexpr size_t kPadded = 64;

class Piece {
 public:
  Piece() = default;
  explicit Piece(std::string text) : size_(text.size()), text_(std::move(text)) {
    text_.resize(std::max(text_.size(), kPadded), ' ');
  }
  size_t size() const { return size_; }
  // Writes the piece at `cursor` and returns the position after it.
  char* Write(char* cursor) const {
    if (size_ <= kPadded) {
      std::memcpy(cursor, text_.data(), kPadded);
    } else {
      std::memcpy(cursor, text_.data(), size_);
    }
    return cursor + size_;
  }

 private:
  size_t size_ = 0;
  std::string text_;
};

// Appends to `out` through a cursor: `bound` bytes reserved up front (plus room for the
// padded copies), the string cut to what was written at the end.
class Cursor {
 public:
  Cursor(std::string& out, size_t bound) : out_(out) {
    const size_t at = out.size();
    out.resize(at + bound + kPadded);
    cursor_ = &out[at];
  }
  ~Cursor() { out_.resize(static_cast<size_t>(cursor_ - out_.data())); }
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;

  void Put(char c) { *cursor_++ = c; }
  void Put(absl::string_view s) {
    std::memcpy(cursor_, s.data(), s.size());
    cursor_ += s.size();
  }
  void Put(const Piece& p) { cursor_ = p.Write(cursor_); }

 private:
  std::string& out_;
  char* cursor_;
};

std::string JsonString(absl::string_view s) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace

CandidateNames::CandidateNames(const std::vector<absl::string_view>& names, bool plain)
    : text_(&names) {
  if (plain || std::none_of(names.begin(), names.end(), NeedsJsonEscaping)) return;
  escaped_.reserve(names.size());
  escaped_views_.reserve(names.size());
  for (absl::string_view name : names) {
    std::string quoted = JsonString(name);
    escaped_.push_back(quoted.substr(1, quoted.size() - 2));
  }
  for (const std::string& e : escaped_) escaped_views_.emplace_back(e);
  text_ = &escaped_views_;
}

void AppendFilterVerdicts(std::string& out, const CandidateNames& names,
                          const std::vector<FitReason>& verdicts, const PodRequest& request,
                          bool list_passing) {
  // Each reason's member (0 NodeNames, 1 FailedNodes, 2 FailedAndUnresolvableNodes) and the
  // text that follows a name there: its closing quote, and in the maps ':' and the message.
  enum Member { kNodeNames, kFailed, kUnresolvable };
  std::array<Member, kFitReasonCount> member;
  std::array<Piece, kFitReasonCount> after_name;
  for (int r = 0; r < kFitReasonCount; ++r) {
    const NodeFit fit{static_cast<FitReason>(r)};
    member[r] = fit.fits() ? kNodeNames : fit.unresolvable() ? kUnresolvable : kFailed;
    after_name[r] = Piece(fit.fits() ? "\"" : "\":" + JsonString(fit.Message(request)));
  }
  // The entries grouped by member, in input order within each (a counting sort: writing
  // them member by member with a test per entry would mispredict a branch per entry, the
  // verdicts of neighbouring nodes being unrelated).
  std::array<size_t, 4> begin{};  // member m's entries: order[begin[m], begin[m + 1])
  size_t bound = 128;             // the keys and brackets
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const size_t r = static_cast<size_t>(verdicts[i]);
    ++begin[member[r] + 1];
    bound += 2 + names[i].size() + after_name[r].size();
  }
  for (size_t m = 1; m < begin.size(); ++m) begin[m] += begin[m - 1];
  std::vector<uint32_t> order(verdicts.size());
  std::array<size_t, 3> next = {begin[0], begin[1], begin[2]};
  for (size_t i = 0; i < verdicts.size(); ++i) {
    order[next[member[static_cast<size_t>(verdicts[i])]]++] = static_cast<uint32_t>(i);
  }

  Cursor c(out, bound);
  static constexpr absl::string_view kOpen[] = {
      "\"NodeNames\":[", ",\"FailedNodes\":{", ",\"FailedAndUnresolvableNodes\":{"};
  static constexpr char kClose[] = {']', '}', '}'};
  for (Member m : {kNodeNames, kFailed, kUnresolvable}) {
    if (m == kNodeNames && !list_passing) {
      c.Put("\"NodeNames\":null");
      continue;
    }
    c.Put(kOpen[m]);
    for (size_t k = begin[m]; k < begin[m + 1]; ++k) {
      const uint32_t i = order[k];
      c.Put(k == begin[m] ? absl::string_view("\"") : absl::string_view(",\""));
      c.Put(names[i]);
      c.Put(after_name[static_cast<size_t>(verdicts[i])]);
    }
    c.Put(kClose[m]);
  }
}

void AppendHostPriorityList(std::string& out, const CandidateNames& names,
                            const std::vector<int64_t>& scores) {
  static const std::array<Piece, kMaxExtenderPriority + 1> kAfterName = [] {
    std::array<Piece, kMaxExtenderPriority + 1> pieces;
    for (int64_t s = 0; s <= kMaxExtenderPriority; ++s) {
      pieces[static_cast<size_t>(s)] = Piece("\",\"Score\":" + std::to_string(s) + "}");
    }
    return pieces;
  }();
  static const Piece kBeforeName("{\"Host\":\"");
  // (Clamped again here: an index out of range would read past the table.)
  auto after_name = [&](size_t i) -> const Piece& {
    return kAfterName[static_cast<size_t>(std::clamp<int64_t>(scores[i], 0, kMaxExtenderPriority))];
  };
  size_t bound = 2;
  for (size_t i = 0; i < scores.size(); ++i) {
    bound += 1 + kBeforeName.size() + names[i].size() + after_name(i).size();
  }
  Cursor c(out, bound);
  c.Put('[');
  for (size_t i = 0; i < scores.size(); ++i) {
    if (i > 0) c.Put(',');
    c.Put(kBeforeName);
    c.Put(names[i]);
    c.Put(after_name(i));
  }
  c.Put(']');
}

}  // namespace gse
