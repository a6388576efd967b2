// libFuzzer target: Kubernetes objects and lists (state/k8s_objects.h) — DecodeObjects, the
// single-object decoders, watch event lines (ParseWatchEventLine, what the reflector reads),
// and the strict JSON reader with its parse-time taps (the collected NodeNames list and the
// noted Node identities that kube-scheduler bodies use).
//
// Properties, each a crash when broken:
//  * no crash, no sanitizer report, whatever the bytes;
//  * the copying and the in-situ parser agree on every input: both accept, or both refuse
//    with the same message;
//  * a collected string list holds exactly the strings the document would have held, and
//    `plain` is true exactly when no element needs escaping;
//  * DecodeNodeIdentity gives the same result or error from a parse-time capture as from
//    the document (k8s_objects.h promises it), and agrees with DecodeNode when that succeeds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "rapidjson/document.h"
#include "state/k8s_objects.h"

namespace gse {
namespace {

std::string Describe(const absl::Status& s) { return s.ok() ? "ok" : std::string(s.message()); }

template <typename T>
std::string Describe(const absl::StatusOr<T>& s) {
  return Describe(s.status());
}

void CheckSameIdentity(const absl::StatusOr<ObjectIdentity>& a,
                       const absl::StatusOr<ObjectIdentity>& b, absl::string_view property) {
  fuzz::Check(a.ok() == b.ok() && Describe(a) == Describe(b), property,
              absl::StrCat(Describe(a), " vs ", Describe(b)));
  if (a.ok()) {
    fuzz::Check(a->name == b->name && a->resource_version == b->resource_version, property,
                absl::StrCat(a->name, "@", a->resource_version, " vs ", b->name, "@",
                             b->resource_version));
  }
}

// Every single-object decoder on `value` (any JSON value): none may crash.
void DecodeAsEveryKind(const rapidjson::Value& value) {
  absl::StatusOr<NodeObject> node = DecodeNode(value, "Node");
  absl::StatusOr<ObjectIdentity> identity = DecodeNodeIdentity(value, "Node");
  if (node.ok()) {
    fuzz::Check(identity.ok() && identity->name == node->name &&
                    identity->resource_version == node->resource_version,
                "DecodeNodeIdentity agrees with DecodeNode", Describe(identity));
  }
  (void)DecodePod(value, "Pod");
  (void)DecodeNamespace(value, "Namespace");
  (void)DecodeResourceQuota(value, "ResourceQuota");
}

}  // namespace
}  // namespace gse

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gse;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);

  // The batch decoder (snapshots, API server lists).
  (void)DecodeObjects(input);

  // Copying parse: the reference for the in-situ one.
  rapidjson::Document doc;
  const absl::Status copied = ParseJsonLimited(input, doc);

  // In-situ parse with the taps the extender uses on kube-scheduler bodies.
  std::string buffer(input);
  rapidjson::Document insitu;
  StringListMember names("NodeNames", kMaxNameBytes);
  ListIdentities identities("Nodes");
  const absl::Status parsed =
      ParseJsonInSituLimited(buffer.data(), buffer.size(), insitu, &names, &identities);
  if (names.error.ok()) {
    // Without a list error both parsers saw the same grammar.
    fuzz::Check(copied.ok() == parsed.ok() && Describe(copied) == Describe(parsed),
                "in-situ and copying parsers agree", Describe(copied) + " vs " + Describe(parsed));
  }
  {
    rapidjson::Document event;
    std::string type;
    const absl::StatusOr<const rapidjson::Value*> object = ParseWatchEventLine(input, event, &type);
    if (!copied.ok()) {
      fuzz::Check(!object.ok() && Describe(object) == Describe(copied),
                  "a watch line is refused as its JSON is", Describe(object));
    } else if (object.ok()) {
      fuzz::Check(!type.empty(), "an accepted watch line has a type");
      DecodeAsEveryKind(**object);
    }
  }
  if (!copied.ok()) return 0;
  {
    // Without taps the in-situ parser agrees exactly, list errors included.
    std::string plain_buffer(input);
    rapidjson::Document plain;
    const absl::Status s = ParseJsonInSituLimited(plain_buffer.data(), plain_buffer.size(), plain);
    fuzz::Check(s.ok(), "in-situ parse without taps accepts what the copying one does",
                Describe(s));
  }

  DecodeAsEveryKind(doc);
  if (doc.IsObject()) {
    for (const char* key : {"Pod", "Nodes", "items", "object"}) {
      auto it = doc.FindMember(key);
      if (it == doc.MemberEnd()) continue;
      DecodeAsEveryKind(it->value);
      if (it->value.IsArray()) {
        for (const rapidjson::Value& item : it->value.GetArray()) DecodeAsEveryKind(item);
      }
    }
  }
  if (!parsed.ok()) return 0;

  // The collected list is the document's NodeNames, element for element.
  // (MemberEnd() of a document that is not an object asserts: look only inside an object.)
  const rapidjson::Value* node_names = nullptr;
  if (doc.IsObject()) {
    const auto member = doc.FindMember("NodeNames");
    if (member != doc.MemberEnd() && member->value.IsArray()) node_names = &member->value;
  }
  const bool has_array = node_names != nullptr;
  fuzz::Check(names.present == has_array, "NodeNames present exactly when it is an array");
  if (has_array) {
    const rapidjson::Value& array = *node_names;
    fuzz::Check(array.Size() == names.values.size(), "NodeNames collects every element");
    bool any_escaping = false;
    for (rapidjson::SizeType i = 0; i < array.Size(); ++i) {
      const absl::string_view want(array[i].GetString(), array[i].GetStringLength());
      fuzz::Check(names.values[i] == want, "NodeNames element collected unchanged",
                  absl::StrCat(i));
      any_escaping = any_escaping || NeedsJsonEscaping(want);
    }
    fuzz::Check(names.plain == !any_escaping, "plain says whether any element needs escaping");
  }

  // Identities noted while parsing decode as the document does.
  if (!identities.usable || !insitu.IsObject()) return 0;
  auto list = insitu.FindMember("Nodes");
  if (list == insitu.MemberEnd() || !list->value.IsObject()) return 0;
  auto items = list->value.FindMember("items");
  if (items == list->value.MemberEnd() || !items->value.IsArray()) return 0;
  fuzz::Check(items->value.Size() == identities.items.size(), "one capture per item");
  for (rapidjson::SizeType i = 0; i < items->value.Size(); ++i) {
    const std::string path = absl::StrCat("Nodes.items[", i, "]");
    CheckSameIdentity(DecodeNodeIdentity(items->value[i], path, &identities.items[i]),
                      DecodeNodeIdentity(items->value[i], path),
                      "DecodeNodeIdentity is the same from a capture");
  }
  return 0;
}
