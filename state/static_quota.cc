// Static quota file parsing (static_quota.h). The document goes through the same hardened
// JSON reader as every other input (size and depth limits, UTF-8 check); keys are checked
// against the catalog so that a typo fails loudly instead of leaving a project unlimited.
#include "state/static_quota.h"

#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "rapidjson/document.h"
#include "state/k8s_objects.h"
#include "state/quantity.h"

namespace gse {
namespace {

absl::Status Invalid(absl::string_view path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat("quota file: ", path, ": ", reason));
}

std::string Key(absl::string_view parent, absl::string_view key) {
  return absl::StrCat(parent, "[\"", key, "\"]");
}

// Every spec.hard key some offering reads (ClusterState counts them the same way).
std::set<std::string> KnownKeys(const Catalog& catalog) {
  std::set<std::string> keys;
  for (const Offering& o : catalog.offerings()) {
    if (!o.quota_key.empty()) keys.insert(o.quota_key);
    keys.insert(absl::StrCat("requests.", o.resource));
    for (const std::string& alias : o.aliases) keys.insert(absl::StrCat("requests.", alias));
  }
  return keys;
}

}  // namespace

absl::StatusOr<StaticQuotas> ParseStaticQuotas(absl::string_view json, const Catalog& catalog) {
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonLimited(json, doc); !s.ok()) {
    return Invalid("document", s.message());
  }
  if (!doc.IsObject()) return Invalid("document", "must be a JSON object");
  for (auto m = doc.MemberBegin(); m != doc.MemberEnd(); ++m) {
    const std::string key(m->name.GetString(), m->name.GetStringLength());
    if (key != "projects") {
      return Invalid(Key("document", key), "unknown field (the only one is \"projects\")");
    }
  }
  auto projects = doc.FindMember("projects");
  if (projects == doc.MemberEnd()) return Invalid("projects", "missing");
  if (!projects->value.IsObject()) return Invalid("projects", "must be an object");
  if (projects->value.MemberCount() > kMaxStaticQuotaProjects) {
    return Invalid("projects", absl::StrCat("more than ", kMaxStaticQuotaProjects, " projects"));
  }

  const std::set<std::string> known = KnownKeys(catalog);
  StaticQuotas out;
  for (auto p = projects->value.MemberBegin(); p != projects->value.MemberEnd(); ++p) {
    const std::string name(p->name.GetString(), p->name.GetStringLength());
    const std::string path = Key("projects", name);
    if (name.empty() || name.size() > kMaxNameBytes) {
      return Invalid(path, absl::StrCat("project name must be 1 to ", kMaxNameBytes, " bytes"));
    }
    for (char c : name) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return Invalid(path, "project name contains a control character");
      }
    }
    if (out.count(name) != 0) return Invalid(path, "project given twice");
    if (!p->value.IsObject()) return Invalid(path, "must be an object of quota key -> quantity");
    std::map<std::string, int64_t>& hard = out[name];
    for (auto e = p->value.MemberBegin(); e != p->value.MemberEnd(); ++e) {
      const std::string key(e->name.GetString(), e->name.GetStringLength());
      const std::string entry = Key(path, key);
      if (known.count(key) == 0) {
        return Invalid(entry, "no catalog offering has this quota key (want requests.<resource>)");
      }
      if (hard.count(key) != 0) return Invalid(entry, "key given twice");
      std::string text;
      if (e->value.IsString()) {
        text.assign(e->value.GetString(), e->value.GetStringLength());
      } else if (e->value.IsInt64()) {
        text = absl::StrCat(e->value.GetInt64());
      } else {
        return Invalid(entry, "must be a quantity (a string like \"8\" or a whole number)");
      }
      absl::StatusOr<int64_t> count = ParseWholeCount(text);
      if (!count.ok()) return Invalid(entry, count.status().message());
      hard[key] = *count * 1000;  // spec.hard is kept in milli-units
    }
  }
  return out;
}

}  // namespace gse
