#include "state/json_fields.h"

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "state/quantity.h"

namespace gse {
namespace json_fields {

using rapidjson::Value;

std::string Path::Render() const {
  std::vector<const Path*> chain;
  for (const Path* p = this; p != nullptr; p = p->parent_) chain.push_back(p);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Path& p = **it;
    switch (p.kind_) {
      case kRoot:
        absl::StrAppend(&out, p.text_);
        break;
      case kField:
        absl::StrAppend(&out, out.empty() ? "" : ".", p.text_);
        break;
      case kIndex:
        absl::StrAppend(&out, "[", p.index_, "]");
        break;
      case kKey:
        absl::StrAppend(&out, "[\"", absl::CEscape(p.text_), "\"]");
        break;
    }
  }
  return out;
}

absl::Status Error(const Path& path, absl::string_view what) {
  std::string where = path.Render();
  if (where.empty()) where = "document";
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

const char* TypeName(const Value& v) {
  switch (v.GetType()) {
    case rapidjson::kNullType: return "null";
    case rapidjson::kFalseType:
    case rapidjson::kTrueType: return "a boolean";
    case rapidjson::kObjectType: return "an object";
    case rapidjson::kArrayType: return "an array";
    case rapidjson::kStringType: return "a string";
    case rapidjson::kNumberType: return "a number";
  }
  return "an unknown value";
}

absl::Status WrongType(const Path& path, absl::string_view expected, const Value& got) {
  return Error(path, absl::StrCat("expected ", expected, ", got ", TypeName(got)));
}

std::string Quote(absl::string_view s) {
  constexpr size_t kShown = 64;
  if (s.size() > kShown) {
    return absl::StrCat("\"", absl::CEscape(s.substr(0, kShown)), "...\" (", s.size(),
                        " bytes)");
  }
  return absl::StrCat("\"", absl::CEscape(s), "\"");
}

absl::Status ReadArray(const Value* v, const Path& path, size_t max, absl::string_view what,
                       const Value** out) {
  *out = nullptr;
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsArray()) return WrongType(path, "an array", *v);
  if (v->Size() > max) {
    return Error(path, absl::StrCat(v->Size(), " ", what, ", at most ", max));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadQuantity(const Value& v, const Path& path, int64_t* out) {
  if (!v.IsString()) return WrongType(path, "a quantity string", v);
  absl::StatusOr<int64_t> milli = ParseQuantityMilli(Str(v));
  if (!milli.ok()) return Error(path, milli.status().message());
  if (*milli < 0) return Error(path, absl::StrCat(Quote(Str(v)), " is negative"));
  *out = *milli;
  return absl::OkStatus();
}

absl::Status CheckName(const Path& path, absl::string_view name, size_t max) {
  if (name.empty()) return Error(path, "empty");
  if (name.size() > max) {
    return Error(path, absl::StrCat(Quote(name), " is longer than ", max, " bytes"));
  }
  for (char c : name) {
    if (c == '/') return Error(path, absl::StrCat(Quote(name), " contains '/'"));
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return Error(path, absl::StrCat(Quote(name), " contains a control character"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadName(const Value* v, const Path& path, size_t max, std::string* out) {
  if (v == nullptr) return Error(path, "missing");
  if (!v->IsString()) return WrongType(path, "a string", *v);
  GSE_RETURN_IF_ERROR(CheckName(path, Str(*v), max));
  out->assign(v->GetString(), v->GetStringLength());
  return absl::OkStatus();
}

}  // namespace json_fields
}  // namespace gse
