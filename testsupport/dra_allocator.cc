// The test allocator (dra_allocator.h).
#include "testsupport/dra_allocator.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "rapidjson/document.h"
#include "testsupport/json_edit.h"

namespace gse::testing {
namespace {

using json::Member;
using json::Quote;
using json::Str;
using rapidjson::Value;

// A quantity in milli-units: an integer with an optional suffix (what slices and the fact
// sheet use: "14", "4864Mi", "1Mi", "500m"). nullopt for anything else.
std::optional<int64_t> QuantityMilli(absl::string_view q) {
  static const std::map<std::string, int64_t> kSuffix = {
      {"", 1000}, {"m", 1}, {"k", 1000 * 1000}, {"M", 1000LL * 1000 * 1000},
      {"G", 1000LL * 1000 * 1000 * 1000}, {"Ki", 1024LL * 1000}, {"Mi", 1024LL * 1024 * 1000},
      {"Gi", 1024LL * 1024 * 1024 * 1000}, {"Ti", 1024LL * 1024 * 1024 * 1024 * 1000}};
  size_t digits = 0;
  while (digits < q.size() && absl::ascii_isdigit(q[digits])) ++digits;
  int64_t n = 0;
  if (digits == 0 || digits > 12 || !absl::SimpleAtoi(q.substr(0, digits), &n)) return std::nullopt;
  auto it = kSuffix.find(std::string(q.substr(digits)));
  if (it == kSuffix.end()) return std::nullopt;
  return n * it->second;
}

// An integer member of the pool object, 0 when absent or not an integer (the slices are
// the test's; a malformed one then makes an incomplete pool, not a crash).
int64_t PoolInt(const Value& slice, const char* key) {
  const Value* spec = Member(slice, "spec");
  const Value* pool = spec ? Member(*spec, "pool") : nullptr;
  const Value* v = pool ? Member(*pool, key) : nullptr;
  return v != nullptr && v->IsInt64() ? v->GetInt64() : 0;
}

rapidjson::Document Parse(const std::string& text) {
  rapidjson::Document d;
  d.Parse(text.c_str());
  return d;
}

struct Capacity {
  int64_t value = 0;
  std::string consumed_text;  // what one share consumes, as written back in consumedCapacity
  int64_t consumed = 0;
};

struct Device {
  std::string driver, pool, name, slice;
  const Value* json = nullptr;  // the device object (attributes...)
  bool multi = false;
  std::map<std::string, Capacity> capacity;
  bool tainted = false;
  bool unmodelled = false;
  std::string Id() const { return absl::StrCat(driver, "/", pool, "/", name); }
};

// A string attribute `name` of `domain` as CEL sees it: unqualified names are in the
// driver's domain.
std::optional<std::string> Attribute(const Device& d, const std::string& domain,
                                     const std::string& name) {
  const Value* attrs = Member(*d.json, "attributes");
  if (attrs == nullptr) return std::nullopt;
  const Value* a = Member(*attrs, absl::StrCat(domain, "/", name).c_str());
  if (a == nullptr && domain == d.driver) a = Member(*attrs, name.c_str());
  if (a == nullptr || Member(*a, "string") == nullptr) return std::nullopt;
  return Str(*a, "string");
}

// Whether `d` matches the class's selectors; errors for CEL runtime errors and for shapes
// this peer does not evaluate.
absl::StatusOr<bool> Matches(const Value& cls, const Device& d) {
  const Value* spec = Member(cls, "spec");
  const Value* sels = spec ? Member(*spec, "selectors") : nullptr;
  if (sels == nullptr || !sels->IsArray()) return true;
  static const std::regex kDriver(R"(^device\.driver == '([^']*)'$)");
  static const std::regex kEq(R"(^device\.attributes\['([^']*)'\]\.(\w+) == '([^']*)'$)");
  static const std::regex kMatch(R"(^device\.attributes\['([^']*)'\]\.(\w+)\.matches\('([^']*)'\)$)");
  for (const Value& sel : sels->GetArray()) {
    const Value* cel = Member(sel, "cel");
    if (cel == nullptr) return absl::UnimplementedError("test allocator: non-CEL selector");
    bool result = true, error = false;
    for (absl::string_view raw : absl::StrSplit(Str(*cel, "expression"), "&&")) {
      const std::string term(absl::StripAsciiWhitespace(raw));
      std::smatch m;
      if (std::regex_match(term, m, kDriver)) {
        result = result && d.driver == m[1].str();
      } else if (std::regex_match(term, m, kEq) || std::regex_match(term, m, kMatch)) {
        std::optional<std::string> v = Attribute(d, m[1].str(), m[2].str());
        if (!v) {
          error = true;
          continue;
        }
        const bool is_match = term.find(".matches(") != std::string::npos;
        result = result && (is_match ? std::regex_search(*v, std::regex(m[3].str()))
                                     : *v == m[3].str());
      } else {
        return absl::UnimplementedError(absl::StrCat("test allocator: selector term ", term));
      }
    }
    if (!result) return false;  // CEL: false && error is false
    if (error) return absl::InvalidArgumentError(absl::StrCat("CEL runtime error on ", d.Id()));
  }
  return true;
}

}  // namespace

std::string DraTestAllocator::NextShareId() {
  // Random in the real allocator; unique here, and reproducible from run to run.
  absl::MutexLock lock(&mu_);
  return absl::StrFormat("00000000-0000-4000-8000-%012d", ++share_counter_);
}

std::string DraTestAllocator::NextSuffix() {
  absl::MutexLock lock(&mu_);
  return absl::StrFormat("%05d", ++counter_ % 100000);
}

absl::StatusOr<DraTestAllocator::Outcome> DraTestAllocator::Plan(absl::string_view ns,
                                                                 absl::string_view pod_name,
                                                                 absl::string_view node_name) {
  std::optional<std::string> pod_text = server_.Get("pods", ns, pod_name);
  if (!pod_text) return absl::NotFoundError(absl::StrCat("pod ", ns, "/", pod_name));
  std::optional<std::string> node_text = server_.Get("nodes", "", node_name);
  if (!node_text) return absl::NotFoundError(absl::StrCat("node ", node_name));
  const rapidjson::Document pod = Parse(*pod_text);
  const rapidjson::Document node = Parse(*node_text);

  std::vector<rapidjson::Document> classes, slices, claims;
  for (const std::string& s : server_.Objects("deviceclasses")) classes.push_back(Parse(s));
  for (const std::string& s : server_.Objects("resourceslices")) slices.push_back(Parse(s));
  for (const std::string& s : server_.Objects("resourceclaims")) claims.push_back(Parse(s));

  // The class mapping a name: explicit or implicit; newer creationTimestamp, then lower name.
  auto class_for = [&](const std::string& resource) -> const Value* {
    const Value* best = nullptr;
    for (const auto& c : classes) {
      const std::string name = Str(c["metadata"], "name");
      const Value* spec = Member(c, "spec");
      const bool maps = (spec != nullptr && Str(*spec, "extendedResourceName") == resource) ||
                        resource == "deviceclass.resource.kubernetes.io/" + name;
      if (!maps) continue;
      if (best == nullptr) {
        best = &c;
        continue;
      }
      const std::string t = Str(c["metadata"], "creationTimestamp");
      const std::string bt = Str((*best)["metadata"], "creationTimestamp");
      const std::string bn = Str((*best)["metadata"], "name");
      if (t > bt || (t == bt && name < bn)) best = &c;
    }
    return best;
  };
  const Value* status = Member(node, "status");
  const Value* allocatable = status ? Member(*status, "allocatable") : nullptr;
  auto dra_backed = [&](const std::string& resource) {
    if (class_for(resource) == nullptr) return false;
    if (allocatable == nullptr) return true;
    const Value* a = Member(*allocatable, resource.c_str());
    return a == nullptr || !a->IsString() || QuantityMilli(a->GetString()).value_or(0) == 0;
  };

  // The walk: the node's (and allNodes) slices, complete pools at their newest generation.
  std::map<std::pair<std::string, std::string>, std::map<std::string, const Value*>> pools;
  for (const auto& s : slices) {
    const Value& spec = s["spec"];
    if (Member(spec, "nodeSelector") || Member(spec, "perDeviceNodeSelection")) {
      return absl::UnimplementedError("test allocator: node selection by selector");
    }
    const Value* all = Member(spec, "allNodes");
    if (Str(spec, "nodeName") != node_name && !(all && all->IsBool() && all->GetBool())) continue;
    pools[{Str(spec, "driver"), Str(spec["pool"], "name")}][Str(s["metadata"], "name")] = &s;
  }
  std::vector<Device> walk;
  for (const auto& [key, by_name] : pools) {
    int64_t gen = 0;
    for (const auto& [n, s] : by_name) gen = std::max(gen, PoolInt(*s, "generation"));
    std::vector<const Value*> current;
    int64_t want = 0;
    for (const auto& [n, s] : by_name) {
      if (PoolInt(*s, "generation") != gen) continue;
      current.push_back(s);
      want = PoolInt(*s, "resourceSliceCount");
    }
    if (static_cast<int64_t>(current.size()) != want) continue;  // incomplete: skipped
    bool reverse = false;
    {
      absl::MutexLock lock(&mu_);
      reverse = reverse_slices_;
    }
    if (reverse) std::reverse(current.begin(), current.end());
    for (const Value* s : current) {
      const Value* devices = Member((*s)["spec"], "devices");
      if (devices == nullptr) continue;
      for (const Value& dj : devices->GetArray()) {
        Device d;
        d.driver = key.first;
        d.pool = key.second;
        d.name = Str(dj, "name");
        d.slice = Str((*s)["metadata"], "name");
        d.json = &dj;
        const Value* multi = Member(dj, "allowMultipleAllocations");
        d.multi = multi != nullptr && multi->IsBool() && multi->GetBool();
        d.unmodelled = Member(dj, "consumesCounters") || Member(dj, "bindingConditions");
        if (const Value* taints = Member(dj, "taints")) {
          for (const Value& t : taints->GetArray()) {
            const std::string e = Str(t, "effect");
            d.tainted = d.tainted || e == "NoSchedule" || e == "NoExecute";
          }
        }
        if (const Value* caps = Member(dj, "capacity")) {
          for (const auto& m : caps->GetObject()) {
            Capacity c;
            c.value = QuantityMilli(Str(m.value, "value")).value_or(0);
            c.consumed_text = Str(m.value, "value");
            if (const Value* pol = Member(m.value, "requestPolicy")) {
              if (Member(*pol, "default")) c.consumed_text = Str(*pol, "default");
            }
            c.consumed = QuantityMilli(c.consumed_text).value_or(0);
            d.capacity[m.name.GetString()] = c;
          }
        }
        walk.push_back(std::move(d));
      }
    }
  }

  // What allocated claims hold.
  std::set<std::string> in_use;
  std::map<std::string, std::map<std::string, int64_t>> used;
  for (const auto& c : claims) {
    const Value* st = Member(c, "status");
    const Value* alloc = st ? Member(*st, "allocation") : nullptr;
    const Value* devs = alloc ? Member(*alloc, "devices") : nullptr;
    const Value* results = devs ? Member(*devs, "results") : nullptr;
    if (results == nullptr) continue;
    for (const Value& r : results->GetArray()) {
      const Value* admin = Member(r, "adminAccess");
      if (admin != nullptr && admin->IsBool() && admin->GetBool()) continue;
      const std::string id = absl::StrCat(Str(r, "driver"), "/", Str(r, "pool"), "/", Str(r, "device"));
      in_use.insert(id);
      if (const Value* cc = Member(r, "consumedCapacity")) {
        for (const auto& m : cc->GetObject()) {
          used[id][m.name.GetString()] += QuantityMilli(m.value.GetString()).value_or(0);
        }
      }
    }
  }

  Outcome out;
  // The claim's requests, as the scheduler builds them (fact sheet §2; upstream
  // extendeddynamicresources.go): per DRA-backed resource, app containers and sidecars (long-
  // lived) get a request each, named container-<c>-request-<r> (c: index in initContainers +
  // containers, r: the resource's index in the container's sorted request keys); a plain init
  // container (short-lived) first reuses the long-lived requests after it, in container order,
  // and asks a request of its own only for the rest; of those, only the largest is kept, and
  // the other init containers are mapped to it.
  struct Container {
    const Value* json;
    bool init, sidecar;
  };
  std::vector<Container> containers;
  const Value& spec = pod["spec"];
  if (const Value* inits = Member(spec, "initContainers"); inits != nullptr && inits->IsArray()) {
    for (const Value& c : inits->GetArray()) containers.push_back({&c, true, Str(c, "restartPolicy") == "Always"});
  }
  if (const Value* apps = Member(spec, "containers"); apps != nullptr && apps->IsArray()) {
    for (const Value& c : apps->GetArray()) containers.push_back({&c, false, false});
  }
  auto requests_of = [](const Value& container) {
    std::set<std::string> keys;
    const Value* res = Member(container, "resources");
    const Value* req = res ? Member(*res, "requests") : nullptr;
    if (req != nullptr) {
      for (const auto& m : req->GetObject()) keys.insert(m.name.GetString());
    }
    return keys;
  };
  struct Request {
    std::string name, resource, container;
    int64_t count = 0;
  };
  std::map<std::string, Request> requests;  // by name: the allocator takes them in that order
  std::set<std::string> resources;
  for (const Container& c : containers) {
    for (const std::string& k : requests_of(*c.json)) {
      if (dra_backed(k)) resources.insert(k);
    }
  }
  for (const std::string& resource : resources) {
    // One container's own request of `resource` (nullopt: none, or 0).
    auto own = [&](size_t i) -> std::optional<Request> {
      const std::set<std::string> keys = requests_of(*containers[i].json);
      auto it = keys.find(resource);
      if (it == keys.end()) return std::nullopt;
      const int64_t count =
          QuantityMilli(Str((*containers[i].json)["resources"]["requests"], resource.c_str())).value_or(0) / 1000;
      if (count <= 0) return std::nullopt;
      Request r;
      r.name = absl::StrCat("container-", i, "-request-", std::distance(keys.begin(), it));
      r.resource = resource;
      r.container = Str(*containers[i].json, "name");
      r.count = count;
      return r;
    };
    std::vector<std::optional<Request>> long_lived(containers.size());
    for (size_t i = 0; i < containers.size(); ++i) {
      if (containers[i].init && !containers[i].sidecar) continue;
      long_lived[i] = own(i);
      if (long_lived[i]) out.mappings.push_back({long_lived[i]->container, resource, long_lived[i]->name});
    }
    std::optional<Request> largest_short;
    std::vector<std::pair<Mapping, bool>> short_mappings;  // and whether it is its own request
    for (size_t i = 0; i < containers.size(); ++i) {
      if (!containers[i].init || containers[i].sidecar) continue;
      std::optional<Request> r = own(i);
      if (!r) continue;
      int64_t reused = 0;
      for (size_t j = i; j < containers.size() && reused < r->count; ++j) {
        if (!long_lived[j]) continue;
        reused += long_lived[j]->count;
        short_mappings.push_back({{r->container, resource, long_lived[j]->name}, false});
      }
      if (reused >= r->count) continue;
      r->count -= reused;
      short_mappings.push_back({{r->container, resource, r->name}, true});
      if (!largest_short || largest_short->count < r->count) largest_short = *r;
    }
    for (auto& [m, own_request] : short_mappings) {
      // Init containers' own requests all become the largest one.
      if (own_request) m.request = largest_short->name;
      out.mappings.push_back(m);
    }
    for (const auto& l : long_lived) {
      if (l) requests[l->name] = *l;
    }
    if (largest_short) requests[largest_short->name] = *largest_short;
  }
  for (const auto& [request_name, request] : requests) {
    const std::string& resource = request.resource;
    const Value* cls = class_for(resource);
    for (int64_t k = 0; k < request.count; ++k) {
      bool found = false;
      for (const Device& d : walk) {
        absl::StatusOr<bool> match = Matches(*cls, d);
        if (!match.ok()) return match.status();
        if (!*match || d.tainted) continue;
        if (d.unmodelled) return absl::UnimplementedError("test allocator: counters or binding conditions");
        const std::string id = d.Id();
        if (!d.multi) {
          if (in_use.count(id)) continue;
        } else {
          bool fits = true;
          for (const auto& [name, c] : d.capacity) {
            if (used[id][name] + c.consumed > c.value) fits = false;
          }
          if (!fits) continue;
        }
        Pick p;
        p.request = request_name;
        p.container = request.container;
        p.resource = resource;
        p.driver = d.driver;
        p.pool = d.pool;
        p.device = d.name;
        in_use.insert(id);
        if (d.multi) {
          p.share_id = NextShareId();
          for (const auto& [name, c] : d.capacity) used[id][name] += c.consumed;
        }
        out.picks.push_back(std::move(p));
        found = true;
        break;
      }
      if (!found) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot allocate all claims: ", resource, " on ", node_name));
      }
    }
  }
  if (!out.picks.empty()) {
    const std::string base = absl::StrCat(pod_name, "-extended-resources-").substr(0, 58);
    out.claim_name = base;  // the suffix is added when written
  }
  return out;
}

absl::StatusOr<DraTestAllocator::Outcome> DraTestAllocator::AllocateAndPreBind(
    absl::string_view ns, absl::string_view pod_name, absl::string_view node_name) {
  absl::StatusOr<Outcome> plan = Plan(ns, pod_name, node_name);
  if (!plan.ok() || plan->picks.empty()) return plan;
  Outcome out = *std::move(plan);
  const std::string generate_name = out.claim_name;
  out.claim_name = absl::StrCat(generate_name, NextSuffix());
  std::optional<std::string> pod_text = server_.Get("pods", ns, pod_name);
  if (!pod_text) return absl::NotFoundError(absl::StrCat("pod ", ns, "/", pod_name, " went away"));
  const rapidjson::Document pod = Parse(*pod_text);
  const std::string pod_uid = Str(pod["metadata"], "uid");

  // Requests (one per container and resource), sorted by name; results in pick order.
  std::map<std::string, std::pair<std::string, int64_t>> requests;  // name -> class, count
  std::vector<rapidjson::Document> class_docs;
  for (const std::string& s : server_.Objects("deviceclasses")) class_docs.push_back(Parse(s));
  for (const Pick& p : out.picks) {
    std::string cls;
    for (const auto& c : class_docs) {
      const Value* spec = Member(c, "spec");
      if ((spec && Str(*spec, "extendedResourceName") == p.resource) ||
          p.resource == "deviceclass.resource.kubernetes.io/" + Str(c["metadata"], "name")) {
        cls = Str(c["metadata"], "name");
      }
    }
    auto& r = requests[p.request];
    r.first = cls;
    ++r.second;
  }
  std::string spec_requests;
  for (const auto& [name, r] : requests) {
    absl::StrAppend(&spec_requests, spec_requests.empty() ? "" : ",", R"({"name":)", Quote(name),
                    R"(,"exactly":{"deviceClassName":)", Quote(r.first),
                    R"(,"allocationMode":"ExactCount","count":)", r.second, "}}");
  }
  // (1) create, as the scheduler POSTs it (no finalizer, no status yet).
  const std::string claim = absl::StrCat(
      R"({"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":)",
      Quote(out.claim_name), R"(,"generateName":)", Quote(generate_name), R"(,"namespace":)",
      Quote(ns), R"(,"annotations":{"resource.kubernetes.io/extended-resource-claim":"true"},)",
      R"("ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":)", Quote(pod_name),
      R"(,"uid":)", Quote(pod_uid), R"(,"controller":true}]},"spec":{"devices":{"requests":[)",
      spec_requests, "]}}}");
  if (absl::Status s = server_.Apply("resourceclaims", claim); !s.ok()) return s;
  // (2) the delete-protection finalizer.
  if (absl::Status s = server_.Mutate("resourceclaims", ns, out.claim_name, [](rapidjson::Document& d) {
        rapidjson::Value f(rapidjson::kArrayType);
        f.PushBack("resource.kubernetes.io/delete-protection", d.GetAllocator());
        d["metadata"].AddMember("finalizers", f, d.GetAllocator());
      });
      !s.ok()) {
    return s;
  }
  // (3) status: allocation (results, node selector) and reservedFor the pod.
  std::string results;
  for (const Pick& p : out.picks) {
    std::string consumed;
    if (!p.share_id.empty()) {
      // Every capacity of the device, by the same rule Plan applied.
      for (const std::string& s : server_.Objects("resourceslices")) {
        rapidjson::Document sd = Parse(s);
        if (Str(sd["spec"], "driver") != p.driver || Str(sd["spec"]["pool"], "name") != p.pool) continue;
        const Value* devices = Member(sd["spec"], "devices");
        if (devices == nullptr) continue;
        for (const Value& d : devices->GetArray()) {
          if (Str(d, "name") != p.device) continue;
          for (const auto& m : d["capacity"].GetObject()) {
            std::string text = Str(m.value, "value");
            if (const Value* pol = Member(m.value, "requestPolicy")) {
              if (Member(*pol, "default")) text = Str(*pol, "default");
            }
            absl::StrAppend(&consumed, consumed.empty() ? "" : ",", Quote(m.name.GetString()), ":",
                            Quote(text));
          }
        }
      }
    }
    absl::StrAppend(&results, results.empty() ? "" : ",", R"({"request":)", Quote(p.request),
                    R"(,"driver":)", Quote(p.driver), R"(,"pool":)", Quote(p.pool),
                    R"(,"device":)", Quote(p.device),
                    p.share_id.empty() ? ""
                                       : absl::StrCat(R"(,"shareID":)", Quote(p.share_id),
                                                      R"(,"consumedCapacity":{)", consumed, "}"),
                    "}");
  }
  const std::string status = absl::StrCat(
      R"({"allocation":{"devices":{"results":[)", results,
      R"(]},"nodeSelector":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name",)",
      R"("operator":"In","values":[)", Quote(node_name),
      R"(]}]}]},"allocationTimestamp":"2026-12-01T00:00:00Z"},"reservedFor":[{"resource":"pods","name":)",
      Quote(pod_name), R"(,"uid":)", Quote(pod_uid), "}]}");
  auto set_member = [](rapidjson::Document& d, rapidjson::Value& obj, const char* key,
                       const std::string& text) {
    rapidjson::Document frag;
    frag.Parse(text.c_str());
    if (obj.HasMember(key)) obj.RemoveMember(key);
    obj.AddMember(rapidjson::Value(key, d.GetAllocator()), rapidjson::Value(frag, d.GetAllocator()),
                  d.GetAllocator());
  };
  if (absl::Status s = server_.Mutate("resourceclaims", ns, out.claim_name,
                                      [&](rapidjson::Document& d) { set_member(d, d, "status", status); });
      !s.ok()) {
    return s;
  }
  // (4) the pod's status.extendedResourceClaimStatus.
  std::string mappings;
  for (const Mapping& m : out.mappings) {
    absl::StrAppend(&mappings, mappings.empty() ? "" : ",", R"({"containerName":)", Quote(m.container),
                    R"(,"resourceName":)", Quote(m.resource), R"(,"requestName":)", Quote(m.request), "}");
  }
  const std::string erc = absl::StrCat(R"({"requestMappings":[)", mappings,
                                       R"(],"resourceClaimName":)", Quote(out.claim_name), "}");
  if (absl::Status s = server_.Mutate("pods", ns, pod_name, [&](rapidjson::Document& d) {
        set_member(d, json::Obj(d, d, "status"), "extendedResourceClaimStatus", erc);
      });
      !s.ok()) {
    return s;
  }
  return out;
}

absl::Status DraTestAllocator::Unreserve(absl::string_view ns, absl::string_view claim) {
  absl::Status s = server_.Mutate("resourceclaims", ns, claim, [](rapidjson::Document& d) {
    rapidjson::Value& meta = json::Obj(d, d, "metadata");
    if (!meta.HasMember("deletionTimestamp")) {
      meta.AddMember("deletionTimestamp", "2026-12-01T00:00:00Z", d.GetAllocator());
    }
  });
  if (!s.ok()) return s;
  server_.Delete("resourceclaims", ns, claim);
  return absl::OkStatus();
}

}  // namespace gse::testing
