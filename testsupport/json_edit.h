// Small RapidJSON helpers for test peers that read and edit Kubernetes objects (the local API
// server, the fault run's cluster and referee): find a member, read a string, make sure an
// object member exists, set a string, serialise. Stateless; any thread.
#ifndef GSE_TESTSUPPORT_JSON_EDIT_H_
#define GSE_TESTSUPPORT_JSON_EDIT_H_

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse::testing::json {

inline std::string Serialize(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return buf.GetString();
}

// `s` as a JSON string literal, quotes included.
inline std::string Quote(absl::string_view s) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return buf.GetString();
}

// The member `key` of `obj`, nullptr when `obj` is no object or has no such member.
inline const rapidjson::Value* Member(const rapidjson::Value& obj, const char* key) {
  if (!obj.IsObject()) return nullptr;
  auto it = obj.FindMember(key);
  return it == obj.MemberEnd() ? nullptr : &it->value;
}

// The string member `key` of `obj`, "" when absent or not a string.
inline std::string Str(const rapidjson::Value& obj, const char* key) {
  const rapidjson::Value* m = Member(obj, key);
  return m != nullptr && m->IsString() ? m->GetString() : "";
}

// The object member `key` of `parent`, created (replacing a non-object) when needed.
inline rapidjson::Value& Obj(rapidjson::Document& doc, rapidjson::Value& parent, const char* key) {
  if (!parent.HasMember(key) || !parent[key].IsObject()) {
    if (parent.HasMember(key)) parent.RemoveMember(key);
    parent.AddMember(rapidjson::Value(key, doc.GetAllocator()),
                     rapidjson::Value(rapidjson::kObjectType), doc.GetAllocator());
  }
  return parent[key];
}

inline void SetStr(rapidjson::Document& doc, rapidjson::Value& obj, absl::string_view key,
                   absl::string_view value) {
  rapidjson::Value v(value.data(), static_cast<rapidjson::SizeType>(value.size()),
                     doc.GetAllocator());
  auto it = obj.FindMember(rapidjson::Value(rapidjson::StringRef(key.data(), key.size())));
  if (it != obj.MemberEnd()) {
    it->value = v;
  } else {
    obj.AddMember(rapidjson::Value(key.data(), static_cast<rapidjson::SizeType>(key.size()),
                                   doc.GetAllocator()),
                  v, doc.GetAllocator());
  }
}

// Removes every member of `obj` whose name starts with `prefix`.
inline void RemovePrefixed(rapidjson::Value& obj, absl::string_view prefix) {
  if (!obj.IsObject()) return;
  for (auto it = obj.MemberBegin(); it != obj.MemberEnd();) {
    if (absl::StartsWith(absl::string_view(it->name.GetString(), it->name.GetStringLength()), prefix)) {
      it = obj.EraseMember(it);
    } else {
      ++it;
    }
  }
}

}  // namespace gse::testing::json

#endif  // GSE_TESTSUPPORT_JSON_EDIT_H_
