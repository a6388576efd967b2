// Field readers for the decoders of Kubernetes objects (k8s_objects.cc, dra_objects.cc):
// strict on the fields a decoder keeps, blind to everything else. Internal to state/; not an
// interface for other layers.
//
// The rules both decoders share: each JSON object is walked once with its members dispatched
// by key (GetFields); a key we read that appears twice is an error, not a silent
// first-or-last-wins choice; a JSON null counts as absent, so optional fields keep their
// default; the JSON path of a field is a chain of stack frames (Path) rendered into a string
// only when an error is reported, as "<path>: <what>" (InvalidArgument).
//
// The small readers are inline: the filter path decodes 5,000 Nodes per request with them.
#ifndef GSE_STATE_JSON_FIELDS_H_
#define GSE_STATE_JSON_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rapidjson/document.h"

// Returns the status of `expr` from the enclosing function when it is not OK.
#define GSE_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    if (absl::Status _s = (expr); !_s.ok()) return _s; \
  } while (0)

namespace gse {
namespace json_fields {

// One step of a path; each frame lives on the decoder's stack and points at its parent.
// Always bind a frame to a named variable before deriving children from it.
class Path {
 public:
  explicit Path(absl::string_view root) : parent_(nullptr), kind_(kRoot), text_(root) {}

  Path Field(absl::string_view name) const { return Path(this, kField, name, 0); }
  Path Index(size_t index) const { return Path(this, kIndex, {}, index); }
  Path Key(absl::string_view key) const { return Path(this, kKey, key, 0); }

  // "spec.devices[3].capacity[\"memory\"]"; the root's text comes first as given.
  std::string Render() const;

 private:
  enum Kind { kRoot, kField, kIndex, kKey };
  Path(const Path* parent, Kind kind, absl::string_view text, size_t index)
      : parent_(parent), kind_(kind), text_(text), index_(index) {}

  const Path* parent_;
  Kind kind_;
  absl::string_view text_;
  size_t index_ = 0;
};

// InvalidArgument "<path>: <what>" ("document: <what>" for an empty path).
absl::Status Error(const Path& path, absl::string_view what);

// "null", "a boolean", "an object", "an array", "a string", "a number".
const char* TypeName(const rapidjson::Value& v);

// "<path>: expected <expected>, got <TypeName(got)>".
absl::Status WrongType(const Path& path, absl::string_view expected, const rapidjson::Value& got);

// A string value as it appears in error messages: quoted, escaped, cut short when long.
std::string Quote(absl::string_view s);

inline absl::string_view Str(const rapidjson::Value& v) {
  return absl::string_view(v.GetString(), v.GetStringLength());
}

// Finds the members named in `names` in one pass over `obj` (which must be an object). A
// JSON null counts as absent (nullptr); a name we read that occurs twice is an error.
template <size_t N>
absl::Status GetFields(const rapidjson::Value& obj, const Path& path,
                       const absl::string_view (&names)[N], const rapidjson::Value* (&out)[N]) {
  bool seen[N] = {};
  for (size_t i = 0; i < N; ++i) out[i] = nullptr;
  for (const auto& member : obj.GetObject()) {
    const absl::string_view key = Str(member.name);
    for (size_t i = 0; i < N; ++i) {
      if (key != names[i]) continue;
      if (seen[i]) return Error(path.Field(names[i]), "duplicate key");
      seen[i] = true;
      if (!member.value.IsNull()) out[i] = &member.value;
      break;
    }
  }
  return absl::OkStatus();
}

// The readers below take a field as GetFields found it: nullptr means absent or null, and
// leaves `out` as it was unless said otherwise.

inline absl::Status RequireObject(const rapidjson::Value& v, const Path& path) {
  if (!v.IsObject()) return WrongType(path, "an object", v);
  return absl::OkStatus();
}

// An optional object field: absent is fine, anything but an object is not.
inline absl::Status OptionalObject(const rapidjson::Value* v, const Path& path) {
  if (v != nullptr && !v->IsObject()) return WrongType(path, "an object", *v);
  return absl::OkStatus();
}

inline absl::Status ReadString(const rapidjson::Value* v, const Path& path, std::string* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsString()) return WrongType(path, "a string", *v);
  out->assign(v->GetString(), v->GetStringLength());
  return absl::OkStatus();
}

inline absl::Status ReadBool(const rapidjson::Value* v, const Path& path, bool* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsBool()) return WrongType(path, "a boolean", *v);
  *out = v->GetBool();
  return absl::OkStatus();
}

inline absl::Status ReadInt64(const rapidjson::Value* v, const Path& path, int64_t* out) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->IsInt64()) return WrongType(path, "an integer", *v);
  *out = v->GetInt64();
  return absl::OkStatus();
}

// A bounded array (`*out` nullptr when absent); `what` names its elements in the error
// ("65 ownerReferences, at most 64").
absl::Status ReadArray(const rapidjson::Value* v, const Path& path, size_t max,
                       absl::string_view what, const rapidjson::Value** out);

// A Kubernetes quantity string (quantity.h), in thousandths, never negative. `v` must be
// present; errors name `path`.
absl::Status ReadQuantity(const rapidjson::Value& v, const Path& path, int64_t* out);

// Object names and namespaces (and other names that become map keys or parts of
// "namespace/name" keys): non-empty, at most `max` bytes, free of '/' and of control
// characters (NUL would cut C strings and logs short). Other bytes (UTF-8 already validated)
// are the API server's business.
absl::Status CheckName(const Path& path, absl::string_view name, size_t max);

// A required name field, checked as CheckName.
absl::Status ReadName(const rapidjson::Value* v, const Path& path, size_t max, std::string* out);

}  // namespace json_fields
}  // namespace gse

#endif  // GSE_STATE_JSON_FIELDS_H_
