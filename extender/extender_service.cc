// ExtenderService: decode -> decide on one mirror snapshot -> (bind: commit) -> encode.
//
// Every verb decodes its whole body before it touches the mirror, so a malformed request
// changes nothing. Wire format and the scheduler's reading of each answer: PROTOCOL.md §1,
// §2.4-2.7. Choices that the protocol leaves open are commented where they are made.
#include "extender/extender_service.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "extender/candidate_answers.h"
#include "extender/pending_pods.h"
#include "kube/kube_client.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "scoring/decision_core.h"
#include "scoring/feasibility.h"
#include "scoring/pod_request.h"
#include "state/assignment.h"
#include "state/dra_objects.h"
#include "state/k8s_objects.h"

namespace gse {
namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr absl::string_view kNoOfferingLabel = "none";
// The resourceVersion cache of request-borne Node objects is dropped wholesale beyond this
// (it only saves work; a hostile stream of invented names must not grow it without bound).
constexpr size_t kMaxAppliedNodeVersions = 200000;

// ---------------------------------------------------------------- JSON helpers

absl::string_view TypeName(const rapidjson::Value& v) {
  switch (v.GetType()) {
    case rapidjson::kNullType: return "null";
    case rapidjson::kFalseType:
    case rapidjson::kTrueType: return "boolean";
    case rapidjson::kObjectType: return "object";
    case rapidjson::kArrayType: return "array";
    case rapidjson::kStringType: return "string";
    case rapidjson::kNumberType: return "number";
  }
  return "unknown";
}

absl::Status Invalid(absl::string_view path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

absl::Status WrongType(absl::string_view path, absl::string_view want,
                       const rapidjson::Value& got) {
  return Invalid(path, absl::StrCat("must be ", want, ", got ", TypeName(got)));
}

// Parses `body` in place (it is ours: the verbs take it by value) and requires an object.
// With `list`, that top-level member is collected instead of stored in `doc` (its errors name
// the member, not the body).
absl::Status ParseBody(std::string& body, rapidjson::Document& doc,
                       StringListMember* list = nullptr, ListIdentities* identities = nullptr) {
  absl::Status parsed = ParseJsonInSituLimited(body.data(), body.size(), doc, list, identities);
  if (list != nullptr && !list->error.ok()) return list->error;
  if (!parsed.ok()) return Invalid("body", parsed.message());
  if (!doc.IsObject()) return WrongType("body", "a JSON object", doc);
  return absl::OkStatus();
}

// A member that may be absent or null (Go marshals nil as null, PROTOCOL §0.3).
const rapidjson::Value* Optional(const rapidjson::Value& obj, const char* key) {
  auto it = obj.FindMember(key);
  if (it == obj.MemberEnd() || it->value.IsNull()) return nullptr;
  return &it->value;
}

void String(JsonWriter& w, absl::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

std::string Finish(const rapidjson::StringBuffer& buf) {
  return std::string(buf.GetString(), buf.GetSize());
}

std::string ErrorBody(absl::string_view message) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("Error");
  String(w, message);
  w.EndObject();
  return Finish(buf);
}

// Filter's answer when it cannot decide: every key present, all but Error null.
std::string FilterErrorBody(absl::string_view message) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("Nodes");
  w.Null();
  w.Key("NodeNames");
  w.Null();
  w.Key("FailedNodes");
  w.Null();
  w.Key("FailedAndUnresolvableNodes");
  w.Null();
  w.Key("Error");
  String(w, message);
  w.EndObject();
  return Finish(buf);
}

VerbResult BadRequest(std::string body) { return VerbResult{400, std::move(body), "bad_request"}; }

// ---------------------------------------------------------------- request decoding

// ExtenderArgs (filter, prioritize). The Node values point into the parsed document, which
// must outlive this.
struct ExtenderArgs {
  PodObject pod;
  // True when the request carried full Node objects (nodeCacheCapable: false); the answer
  // then lists Node objects, else node names (PROTOCOL §0.7).
  bool nodes_mode = false;
  // nodes_mode only, parallel: each item's identity (validated) and its JSON. The rest of an
  // item is decoded only when the mirror has not applied that resourceVersion yet
  // (Impl::RefreshNodes): kube-scheduler resends the same objects on every call.
  std::vector<ObjectIdentity> identities;
  std::vector<const rapidjson::Value*> node_json;
  // The candidates, in input order: views into the parsed body (NodeNames) or into
  // `identities` (both outlive the verb); no per-name copy on a 5,000-name request.
  std::vector<absl::string_view> names;
  // No name needs JSON escaping (CandidateNames): known from the parser for NodeNames.
  bool names_plain = false;
};

std::string NodeItemPath(size_t i) { return absl::StrCat("Nodes.items[", i, "]"); }

absl::StatusOr<PodObject> DecodePodMember(const rapidjson::Value& root) {
  auto it = root.FindMember("Pod");
  if (it == root.MemberEnd() || it->value.IsNull()) return Invalid("Pod", "missing");
  if (!it->value.IsObject()) return WrongType("Pod", "an object", it->value);
  return DecodePod(it->value, "Pod");
}

// Both Nodes and NodeNames null (never sent by kube-scheduler) decode as an empty NodeNames
// list: there is nothing to pass. When both are set (the upstream round-trip test does it),
// Nodes wins, as it carries facts the names do not. `node_names`: the body's NodeNames,
// already checked element by element while parsing; `node_ids`: the Node items' identities
// as the parser noted them.
absl::StatusOr<ExtenderArgs> DecodeExtenderArgs(const rapidjson::Document& doc,
                                                StringListMember& node_names,
                                                const ListIdentities& node_ids) {
  ExtenderArgs args;
  absl::StatusOr<PodObject> pod = DecodePodMember(doc);
  if (!pod.ok()) return pod.status();
  args.pod = *std::move(pod);

  if (const rapidjson::Value* nodes = Optional(doc, "Nodes")) {
    if (!nodes->IsObject()) return WrongType("Nodes", "a NodeList object or null", *nodes);
    args.nodes_mode = true;
    if (const rapidjson::Value* items = Optional(*nodes, "items")) {
      if (!items->IsArray()) return WrongType("Nodes.items", "an array", *items);
      args.identities.reserve(items->Size());
      args.node_json.reserve(items->Size());
      args.names.reserve(items->Size());
      const bool noted = node_ids.usable && node_ids.items.size() == items->Size();
      for (rapidjson::SizeType i = 0; i < items->Size(); ++i) {
        const rapidjson::Value& item = (*items)[i];
        if (!item.IsObject()) return WrongType(NodeItemPath(i), "a Node object", item);
        absl::StatusOr<ObjectIdentity> id =
            DecodeNodeIdentity(item, NodeItemPath(i), noted ? &node_ids.items[i] : nullptr);
        if (!id.ok()) return id.status();
        args.identities.push_back(*std::move(id));
        args.node_json.push_back(&item);
      }
      // Only now that `identities` no longer grows may views point into it.
      for (const ObjectIdentity& id : args.identities) args.names.push_back(id.name);
    }
    return args;
  }
  args.names = std::move(node_names.values);
  args.names_plain = node_names.plain;
  return args;
}

// Parses and decodes a filter or prioritize body (in place: `body` must outlive the result).
absl::StatusOr<ExtenderArgs> ParseArgs(std::string& body, rapidjson::Document& doc) {
  StringListMember node_names("NodeNames", kMaxNameBytes);
  ListIdentities node_ids("Nodes");
  if (absl::Status s = ParseBody(body, doc, &node_names, &node_ids); !s.ok()) return s;
  return DecodeExtenderArgs(doc, node_names, node_ids);
}

absl::StatusOr<BindTarget> DecodeBindArgs(const rapidjson::Document& doc) {
  BindTarget t;
  // Every field is required. kube-scheduler always sends PodUID, and the Binding needs it:
  // its UID precondition keeps a recreated pod of the same name from being bound by mistake,
  // and the mirror identifies pods by UID.
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"PodName", &t.pod_name},
                                 {"PodNamespace", &t.pod_namespace},
                                 {"PodUID", &t.pod_uid},
                                 {"Node", &t.node}}) {
    auto it = doc.FindMember(key);
    if (it == doc.MemberEnd() || it->value.IsNull()) return Invalid(key, "missing");
    if (!it->value.IsString()) return WrongType(key, "a string", it->value);
    if (it->value.GetStringLength() > kMaxNameBytes) {
      return Invalid(key, absl::StrCat("longer than ", kMaxNameBytes, " bytes"));
    }
    out->assign(it->value.GetString(), it->value.GetStringLength());
    if (out->empty()) return Invalid(key, "empty");
  }
  if (std::string problem = UidProblem(t.pod_uid); !problem.empty()) {
    return Invalid("PodUID", problem);
  }
  return t;
}

struct VictimSet {
  std::string node;
  std::vector<std::string> uids;
  int64_t pdb_violations = 0;
};

// ExtenderPreemptionArgs: NodeNameToMetaVictims (UIDs) or NodeNameToVictims (full Pods, of
// which only metadata.uid matters). Meta wins when both are set, as it is what we answer in.
absl::StatusOr<std::vector<VictimSet>> DecodeVictims(const rapidjson::Document& doc) {
  const char* key = "NodeNameToMetaVictims";
  const rapidjson::Value* map = Optional(doc, key);
  bool full_pods = false;
  if (map == nullptr) {
    key = "NodeNameToVictims";
    map = Optional(doc, key);
    full_pods = true;
  }
  std::vector<VictimSet> out;
  if (map == nullptr) return out;
  if (!map->IsObject()) return WrongType(key, "an object or null", *map);
  for (auto m = map->MemberBegin(); m != map->MemberEnd(); ++m) {
    VictimSet set;
    set.node.assign(m->name.GetString(), m->name.GetStringLength());
    const std::string path = absl::StrCat(key, "[\"", set.node, "\"]");
    if (set.node.empty() || set.node.size() > kMaxNameBytes) {
      return Invalid(path, "node name must be 1 to 253 bytes");
    }
    if (!m->value.IsObject()) return WrongType(path, "an object", m->value);
    if (const rapidjson::Value* n = Optional(m->value, "NumPDBViolations")) {
      if (!n->IsInt64()) return WrongType(path + ".NumPDBViolations", "an integer", *n);
      set.pdb_violations = n->GetInt64();
    }
    if (const rapidjson::Value* pods = Optional(m->value, "Pods")) {
      if (!pods->IsArray()) return WrongType(path + ".Pods", "an array", *pods);
      for (rapidjson::SizeType i = 0; i < pods->Size(); ++i) {
        const rapidjson::Value& p = (*pods)[i];
        const std::string ppath = absl::StrCat(path, ".Pods[", i, "]");
        if (!p.IsObject()) return WrongType(ppath, "an object", p);
        const rapidjson::Value* uid = nullptr;
        std::string upath;
        if (full_pods) {
          const rapidjson::Value* meta = Optional(p, "metadata");
          if (meta == nullptr) return Invalid(ppath + ".metadata", "missing");
          if (!meta->IsObject()) return WrongType(ppath + ".metadata", "an object", *meta);
          uid = Optional(*meta, "uid");
          upath = ppath + ".metadata.uid";
        } else {
          uid = Optional(p, "UID");
          upath = ppath + ".UID";
        }
        if (uid == nullptr) return Invalid(upath, "missing");
        if (!uid->IsString()) return WrongType(upath, "a string", *uid);
        if (uid->GetStringLength() == 0) return Invalid(upath, "empty");
        set.uids.emplace_back(uid->GetString(), uid->GetStringLength());
      }
    }
    out.push_back(std::move(set));
  }
  return out;
}

// The text of each Node object in a filter request, for echoing passing nodes back byte for
// byte instead of re-serialising them from the DOM (a third of the time of a 5,000-Node
// filter). `raw` is a copy of the body taken before it was parsed in place at `parsed`: an
// in-situ document's strings point into `parsed`, at the offsets their text has in `raw`, so
// an item's first key locates its opening brace, and an item ends where the next one begins
// (the last one is scanned to its closing brace). Empty when the layout is not as expected;
// the caller then re-serialises.
std::vector<absl::string_view> RawItemSpans(const std::string& raw, const char* parsed,
                                            const std::vector<const rapidjson::Value*>& items) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  std::vector<size_t> begins;
  begins.reserve(items.size());
  for (const rapidjson::Value* item : items) {
    if (!item->IsObject() || item->MemberCount() == 0) return {};
    const char* key = item->MemberBegin()->name.GetString();
    if (key <= parsed || key >= parsed + raw.size()) return {};
    size_t i = static_cast<size_t>(key - parsed) - 1;  // the key's opening quote
    if (raw[i] != '"') return {};
    while (i > 0 && is_space(raw[i - 1])) --i;
    if (i == 0 || raw[i - 1] != '{') return {};
    begins.push_back(i - 1);
  }
  std::vector<absl::string_view> spans;
  spans.reserve(items.size());
  for (size_t k = 0; k < begins.size(); ++k) {
    size_t end = 0;  // one past the closing brace
    if (k + 1 < begins.size()) {
      size_t j = begins[k + 1];
      while (j > begins[k] && is_space(raw[j - 1])) --j;
      if (j == begins[k] || raw[j - 1] != ',') return {};
      --j;
      while (j > begins[k] && is_space(raw[j - 1])) --j;
      if (j == begins[k] || raw[j - 1] != '}') return {};
      end = j;
    } else {
      int depth = 0;
      bool in_string = false;
      for (size_t j = begins[k]; j < raw.size() && end == 0; ++j) {
        const char c = raw[j];
        if (in_string) {
          if (c == '\\') {
            ++j;
          } else if (c == '"') {
            in_string = false;
          }
        } else if (c == '"') {
          in_string = true;
        } else if (c == '{' || c == '[') {
          ++depth;
        } else if ((c == '}' || c == ']') && --depth == 0) {
          end = j + 1;
        }
      }
      if (end == 0) return {};
    }
    spans.emplace_back(raw.data() + begins[k], end - begins[k]);
  }
  return spans;
}

// Whether `body` has a "Nodes" key whose value is an object (a NodeList), by a scan of the raw
// text: a false positive (the text inside some string) only costs a copy. The scan covers the
// whole body (a names-only body has "Nodes":null and no other), so it uses glibc's memmem:
// std::string::find stops at every '"', and a 5,000-name body has 10,000 of them (a fifth of
// the in-process filter went there; std::boyer_moore_horspool_searcher saved 33 us of the 52
// that memmem saves at 5,000 names).
bool MayCarryNodeObjects(const std::string& body) {
  static constexpr absl::string_view kKey = "\"Nodes\"";
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  auto next = [&](size_t from) -> size_t {
    const void* hit = memmem(body.data() + from, body.size() - from, kKey.data(), kKey.size());
    return hit == nullptr ? std::string::npos : static_cast<size_t>(static_cast<const char*>(hit) - body.data());
  };
  for (size_t at = next(0); at != std::string::npos; at = next(at + 1)) {
    size_t i = at + kKey.size();
    while (i < body.size() && is_space(body[i])) ++i;
    if (i >= body.size() || body[i] != ':') continue;
    ++i;
    while (i < body.size() && is_space(body[i])) ++i;
    if (i < body.size() && body[i] == '{') return true;
  }
  return false;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// ---------------------------------------------------------------- service state

struct ExtenderService::Impl {
  Impl(Mirror* m, const PlacementPolicy* policy, Binder* b, ServiceOptions o)
      : mirror(m), core(m, policy, DecisionCore::Options{o.score_pods_without_offering}), binder(b), options(o), pending(o.max_pending_pods) {}

  // Applies request-borne Node objects that changed since we last applied them (by
  // resourceVersion) or that the mirror does not hold; decodes only those, and takes the
  // writer lock only then, so a steady stream of identical Node lists costs reader locks
  // only. A stale item that does not decode fails the request and changes nothing.
  absl::Status RefreshNodes(const ExtenderArgs& args);

  Mirror* const mirror;
  // Every decision: the verbs only decode, call it and encode.
  DecisionCore core;
  Binder* const binder;
  const ServiceOptions options;
  PendingPods pending;

  absl::Mutex versions_mu;
  absl::flat_hash_map<std::string, std::string> applied_versions ABSL_GUARDED_BY(versions_mu);
};

absl::Status ExtenderService::Impl::RefreshNodes(const ExtenderArgs& args) {
  const std::vector<ObjectIdentity>& ids = args.identities;
  std::vector<char> stale(ids.size(), 0);
  {
    absl::MutexLock lock(&versions_mu);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = applied_versions.find(ids[i].name);
      stale[i] = ids[i].resource_version.empty() || it == applied_versions.end() ||
                 it->second != ids[i].resource_version;
    }
  }
  // Unchanged versions still need the node present: a relist or deletion may have dropped it.
  // (Looked up through the remembered candidate list, which the verb reuses right after.)
  bool any = mirror->Read([&](const ClusterState& state) {
    const std::shared_ptr<const CandidateNodes> found = core.LookUp(state, args.names);
    bool found_stale = false;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!stale[i]) {
        const NodeState* node = found->nodes[i];
        stale[i] = node == nullptr || node->removed;
      }
      found_stale = found_stale || stale[i];
    }
    return found_stale;
  });
  if (!any) return absl::OkStatus();
  std::vector<NodeObject> decoded;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!stale[i]) continue;
    absl::StatusOr<NodeObject> node = DecodeNode(*args.node_json[i], NodeItemPath(i));
    if (!node.ok()) return node.status();
    decoded.push_back(*std::move(node));
  }
  mirror->Write([&](ClusterState& state) {
    for (const NodeObject& node : decoded) state.ApplyNode(node);
    return true;
  });
  absl::MutexLock lock(&versions_mu);
  if (applied_versions.size() > kMaxAppliedNodeVersions) applied_versions.clear();
  for (const NodeObject& node : decoded) {
    if (!node.resource_version.empty()) applied_versions[node.name] = node.resource_version;
  }
  return absl::OkStatus();
}

ExtenderService::ExtenderService(Mirror* mirror, std::unique_ptr<PlacementPolicy> policy,
                                 Binder* binder, ServiceOptions options)
    // impl_ is initialised first (declaration order), while `policy` still holds the policy.
    : impl_(std::make_unique<Impl>(mirror, policy.get(), binder, options)),
      policy_(std::move(policy)) {
  // Series that dashboards and alerts query exist (at 0) before the first decision.
  if (options.metrics != nullptr) {
    mirror->Read([&](const ClusterState& state) { options.metrics->InitSeries(state.catalog()); });
  }
}

ExtenderService::~ExtenderService() = default;

// ---------------------------------------------------------------- readiness

const char* Readiness::label() const {
  switch (state) {
    case State::kReady: return "ready";
    case State::kNotSynced: return "not_synced";
    case State::kNotLeader: return "not_leader";
    case State::kStopping: return "stopping";
  }
  return "not_synced";
}

Readiness Readiness::Ready() { return Readiness(); }

Readiness Readiness::NotSynced() {
  Readiness r;
  r.state = State::kNotSynced;
  r.message = "extender cache not synced yet";
  return r;
}

Readiness Readiness::TakingOver() {
  Readiness r = NotSynced();
  r.message += ": this replica has just taken the Lease over and relists the cluster first";
  return r;
}

Readiness Readiness::NotLeader(const std::string& leader, const std::string& lease) {
  Readiness r;
  r.state = State::kNotLeader;
  r.leader = leader;
  r.message = leader.empty()
                  ? absl::StrCat("not the leader; no replica holds the Lease ", lease,
                                 " right now (a take-over is under way)")
                  : absl::StrCat("not the leader; ", leader, " leads (Lease ", lease, ")");
  return r;
}

Readiness Readiness::Stopping() {
  Readiness r;
  r.state = State::kStopping;
  r.message = "extender is shutting down";
  return r;
}

void ExtenderService::SetReady(bool ready) {
  SetReadiness(ready ? Readiness::Ready() : Readiness::NotSynced());
}

void ExtenderService::SetReadiness(Readiness readiness) {
  const bool ready = readiness.ready();
  {
    absl::MutexLock lock(&readiness_mu_);
    readiness_ = std::move(readiness);
  }
  // After the reason: a verb that sees ready_ false finds why.
  ready_.store(ready);
}

Readiness ExtenderService::readiness() const {
  absl::MutexLock lock(&readiness_mu_);
  return readiness_;
}

Readiness ExtenderService::WhyNotReady() const {
  Readiness r = readiness();
  // A verb saw ready_ false and the owner made the service ready since: this answer still
  // refuses, so it needs a reason.
  return r.ready() ? Readiness::NotSynced() : r;
}

bool ExtenderService::WaitForBindsToFinish(absl::Duration timeout) const {
  // Polled: timed absl waits are invisible to TSan with Debian's uninstrumented Abseil.
  const absl::Time deadline = absl::Now() + timeout;
  while (binds_in_flight_.load() > 0) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// ---------------------------------------------------------------- filter

VerbResult ExtenderService::Filter(std::string body) {
  if (!Ready()) return VerbResult{200, FilterErrorBody(WhyNotReady().message), "error"};
  // Full Node objects are echoed from the text as it arrived (RawItemSpans): keep a copy of a
  // body that may carry them before it is parsed in place. kube-scheduler's names-only bodies
  // say "Nodes":null, and are not copied.
  std::string raw;
  if (MayCarryNodeObjects(body)) raw = body;
  const size_t body_size = body.size();
  rapidjson::Document doc;
  absl::StatusOr<ExtenderArgs> args = ParseArgs(body, doc);
  if (!args.ok()) return BadRequest(FilterErrorBody(args.status().message()));
  if (args->nodes_mode) {
    if (absl::Status s = impl_->RefreshNodes(*args); !s.ok()) {
      return BadRequest(FilterErrorBody(s.message()));
    }
  }

  const DecisionLog& log = impl_->options.decision_log != nullptr ? *impl_->options.decision_log
                                                                   : DecisionLog::Default();
  FilterDecision decision =
      impl_->core.Filter(args->pod, args->names, log.Wants(DecisionLog::kFilterNotesOutcome));
  const std::vector<FitReason>& verdicts = decision.verdicts;
  const PodRequest& request = decision.request;
  std::array<int64_t, kFitReasonCount> reason_counts{};
  int passed_count = 0;
  for (FitReason r : verdicts) {
    ++reason_counts[static_cast<size_t>(r)];
    passed_count += r == FitReason::kFits ? 1 : 0;
  }
  if (!decision.dra_notes.empty()) {
    FilterNotes notes;
    notes.pod_namespace = args->pod.namespace_name;
    notes.pod_name = args->pod.name;
    notes.pod_uid = args->pod.uid;
    notes.project = request.project;
    notes.offering = decision.offering_label;
    notes.candidates = static_cast<int32_t>(verdicts.size());
    notes.passed = passed_count;
    notes.dra_notes = std::move(decision.dra_notes);
    log.Log(notes);
  }
  impl_->pending.Remember(std::move(args->pod));

  std::string out = "{\"Nodes\":";
  if (args->nodes_mode) {
    // The input Node objects, unmodified (PROTOCOL §2.4: newer schedulers expect their own):
    // their own text where it can be located, else re-serialised from the document.
    out.append("{\"metadata\":{},\"items\":[");
    const std::vector<absl::string_view> spans = RawItemSpans(raw, body.data(), args->node_json);
    if (!spans.empty()) {
      out.reserve(out.size() + body_size);
      bool first = true;
      for (size_t i = 0; i < verdicts.size(); ++i) {
        if (verdicts[i] != FitReason::kFits) continue;
        if (!first) out.push_back(',');
        first = false;
        out.append(spans[i].data(), spans[i].size());
      }
    } else {
      // Sized for the whole body up front: growing a multi-megabyte buffer by doubling costs
      // more than writing it.
      rapidjson::StringBuffer items(nullptr, body_size);
      JsonWriter w(items);
      bool first = true;
      for (size_t i = 0; i < verdicts.size(); ++i) {
        if (verdicts[i] != FitReason::kFits) continue;
        if (!first) items.Put(',');
        first = false;
        args->node_json[i]->Accept(w);
        w.Reset(items);  // one writer per top-level value
      }
      out.append(items.GetString(), items.GetSize());
    }
    out.append("]},");
  } else {
    out.append("null,");
  }
  AppendFilterVerdicts(out, CandidateNames(args->names, args->names_plain), verdicts, request,
                       /*list_passing=*/!args->nodes_mode);
  out.append(",\"Error\":\"\"}");

  if (ExtenderMetrics* m = impl_->options.metrics) {
    for (int r = 0; r < kFitReasonCount; ++r) {
      m->ObserveFilterVerdicts(decision.offering_label, FitReasonLabel(static_cast<FitReason>(r)),
                               reason_counts[static_cast<size_t>(r)]);
    }
    m->ObserveFilterNodes(passed_count, static_cast<int>(verdicts.size()) - passed_count);
    if (decision.spill_outside_candidates) {
      m->ObserveSpill(decision.offering_label, "no_candidate_with_own_unit");
    }
  }
  return VerbResult{200, std::move(out), "ok"};
}

// ---------------------------------------------------------------- prioritize

VerbResult ExtenderService::Prioritize(std::string body) {
  // HostPriorityList has no Error field, and kube-scheduler ignores every prioritize error
  // (PROTOCOL §2.5): a 503 makes it score our nodes 0 instead of trusting a stale mirror.
  if (!Ready()) return VerbResult{503, ErrorBody(WhyNotReady().message), "error"};
  rapidjson::Document doc;
  absl::StatusOr<ExtenderArgs> args = ParseArgs(body, doc);
  if (!args.ok()) return BadRequest(ErrorBody(args.status().message()));
  if (args->nodes_mode) {
    if (absl::Status s = impl_->RefreshNodes(*args); !s.ok()) {
      return BadRequest(ErrorBody(s.message()));
    }
  }

  const std::vector<int64_t> scores = impl_->core.Prioritize(args->pod, args->names);
  impl_->pending.Remember(std::move(args->pod));

  std::string out;
  AppendHostPriorityList(out, CandidateNames(args->names, args->names_plain), scores);
  return VerbResult{200, std::move(out), "ok"};
}

// ---------------------------------------------------------------- bind

namespace {

// burst (issue 14): a bind whose POST the API write limiter could not send before the bind's
// deadline was never sent (kube_client.h IsNotSent): definitely not bound, not an API error,
// and kube-scheduler's retry may well succeed. Every other Binder error is the API's answer.
std::string BindFailureMessage(const absl::Status& s) {
  return IsNotSent(s) ? absl::StrCat("bind timed out before it could be sent (pod not bound; "
                                     "retry): ", s.message())
                      : absl::StrCat("binding rejected: ", s.message());
}

// DRA-backed units: the real devices, as gpu.themelio.io/dra-devices (assignment.h).
void AddDraDeviceAnnotation(const ClusterState& state, const Assignment& a,
                            std::map<std::string, std::string>& annotations) {
  const NodeState* node = state.FindNode(a.node);
  const NodeOffering* no = node != nullptr ? node->Find(a.offering) : nullptr;
  if (no == nullptr || !no->dra) return;
  std::string devices;
  for (int32_t i : a.units) {
    const size_t u = static_cast<size_t>(i);
    if (u >= no->unit_devices.size()) continue;
    absl::StrAppend(&devices, devices.empty() ? "" : ",", no->unit_devices[u], "=",
                    u < no->unit_uuids.size() ? no->unit_uuids[u] : "");
  }
  annotations[std::string(kAnnotationDraDevices)] = devices;
}

// gse_bind_total's outcome for a reservation the core refused.
const char* RefusalOutcome(ReserveRefusal refusal) {
  switch (refusal) {
    case ReserveRefusal::kQuota: return "quota";
    case ReserveRefusal::kNoFit: return "no_fit";
    case ReserveRefusal::kDraRefused: return "dra_refused";
    case ReserveRefusal::kNone:
    case ReserveRefusal::kUnitTaken: break;
  }
  return "unit_taken";
}

}  // namespace

VerbResult ExtenderService::Bind(std::string body) {
  const auto started = std::chrono::steady_clock::now();
  ExtenderMetrics* metrics = impl_->options.metrics;
  const DecisionLog& log = impl_->options.decision_log != nullptr ? *impl_->options.decision_log
                                                                   : DecisionLog::Default();
  // Filled in as the bind learns facts; every way out counts and logs it exactly once.
  BindDecision decision;
  auto record = [&](absl::string_view offering, absl::string_view outcome, double api_seconds,
                    absl::string_view error) {
    if (metrics != nullptr) metrics->ObserveBind(offering, outcome, api_seconds);
    if (log.Wants(outcome)) {
      decision.offering = std::string(offering);
      decision.outcome = std::string(outcome);
      decision.reason = std::string(error);
      decision.api_seconds = api_seconds;
      decision.latency_seconds = SecondsSince(started);
      log.Log(decision);
    }
  };
  auto answer = [&](absl::string_view offering, absl::string_view outcome, double api_seconds,
                    absl::string_view error) {
    record(offering, outcome, api_seconds, error);
    return VerbResult{200, ErrorBody(error), error.empty() ? "ok" : "error"};
  };
  auto fill_target = [&](const BindTarget& t) {
    decision.pod_namespace = t.pod_namespace;
    decision.pod_name = t.pod_name;
    decision.pod_uid = t.pod_uid;
    decision.node = t.node;
  };

  rapidjson::Document doc;
  // Counted before readiness is read (see BindsInFlight): shutdown waits for this bind.
  binds_in_flight_.fetch_add(1);
  struct Done {
    std::atomic<int64_t>& n;
    ~Done() { n.fetch_sub(1); }
  } done{binds_in_flight_};
  if (!Ready()) {
    const Readiness why = WhyNotReady();
    // A replica that is shutting down is giving its lease up: counted as not leading.
    const char* outcome =
        why.state == Readiness::State::kStopping ? "not_leader" : why.label();
    // The body is only read to name the pod in the decision log.
    if (log.Wants(outcome) && ParseBody(body, doc).ok()) {
      if (absl::StatusOr<BindTarget> t = DecodeBindArgs(doc); t.ok()) fill_target(*t);
    }
    return answer(kNoOfferingLabel, outcome, -1, why.message);
  }

  absl::StatusOr<BindTarget> target = absl::InvalidArgumentError("");
  if (absl::Status s = ParseBody(body, doc); !s.ok()) {
    target = s;
  } else {
    target = DecodeBindArgs(doc);
  }
  if (!target.ok()) {
    record(kNoOfferingLabel, "bad_request", -1, target.status().message());
    return BadRequest(ErrorBody(target.status().message()));
  }
  fill_target(*target);

  std::optional<PodObject> pod =
      impl_->pending.Find(target->pod_uid, target->pod_namespace, target->pod_name);
  if (!pod.has_value()) {
    return answer(kNoOfferingLabel, "unknown_pod", -1,
                  absl::StrCat("pod ", target->pod_namespace, "/", target->pod_name,
                               " was not seen in filter; cannot bind"));
  }

  const DecisionCore::Resolved resolved = impl_->core.Resolve(*pod);
  const PodRequest& request = resolved.request;
  const std::string& offering_label = resolved.offering_label;
  const bool time_sliced = resolved.time_sliced;
  decision.project = request.project;

  auto call_binder = [&](const std::map<std::string, std::string>& annotations,
                         double* seconds) {
    const auto start = std::chrono::steady_clock::now();
    BindResult r = impl_->binder->Bind(*target, annotations);
    *seconds = SecondsSince(start);
    return r;
  };
  // Not bound: the API refused (api_error) or may have bound it (api_unknown, issue 12,
  // finding 1); kube-scheduler retries the pod either way.
  // A POST the write limiter never sent (issue 14) is not bound and no API error:
  // client_throttled.
  // A POST kept back because this replica's Lease is no longer valid (fencing, issue 12) is
  // not bound either, and no API error: lease_lost.
  auto failed = [&](const BindResult& r, double seconds) {
    if (r.outcome == BindOutcome::kNotBound && IsNotSent(r.status)) {
      return answer(offering_label, "client_throttled", seconds, BindFailureMessage(r.status));
    }
    if (r.outcome == BindOutcome::kNotBound && IsFenced(r.status)) {
      return answer(offering_label, "lease_lost", seconds,
                    absl::StrCat("pod not bound; retry: ", r.status.message()));
    }
    const bool unknown = r.outcome == BindOutcome::kUnknown;
    return answer(offering_label, unknown ? "api_unknown" : "api_error", seconds,
                  absl::StrCat(unknown ? "binding outcome unknown: " : "binding rejected: ",
                               r.status.message()));
  };

  if (!request.interested()) {
    // Nothing of ours to reserve: bind as the default binder would (managedResources keeps
    // such pods away from us unless the extender entry has none, for --score-all-pods).
    double seconds = 0;
    const BindResult r = call_binder({}, &seconds);
    if (!r.bound()) return failed(r, seconds);
    impl_->pending.Forget(target->pod_uid, target->pod_namespace, target->pod_name);
    return answer(offering_label, "bound", seconds, "");
  }
  if (!request.unresolvable.empty()) {
    return answer(offering_label, "no_fit", -1,
                  absl::StrCat("binding rejected: ", request.unresolvable));
  }

  const PodClaim claim{pod->Key(), pod->uid, pod->namespace_name, request.project};
  const std::string pod_id = PodIdOf(claim.uid, claim.key);
  if (log.level() != DecisionLogLevel::kOff) {
    decision.dra_notes = impl_->core.DraBindNotes(request, target->node);
  }
  absl::StatusOr<std::string> dra_claim = DraClaimKey(*target, request);
  if (!dra_claim.ok()) {
    return answer(offering_label, "dra_refused", -1,
                  absl::StrCat("binding rejected: ", target->node, ": ",
                               dra_claim.status().message()));
  }
  DraBindClaim dra{*dra_claim, kDraClaimWait, nullptr};
  if (!dra.key.empty() && impl_->options.dra_claim_read) {
    dra.read = [&]() -> absl::StatusOr<DraResourceClaim> {
      const size_t slash = dra.key.find('/');
      absl::StatusOr<DraResourceClaim> c = impl_->options.dra_claim_read(
          absl::string_view(dra.key).substr(0, slash), absl::string_view(dra.key).substr(slash + 1));
      if (metrics != nullptr) metrics->ObserveDraClaimRead(c.ok());
      return c;
    };
  }
  const ReserveDecision reservation = impl_->core.Reserve(claim, request, target->node, dra);
  const absl::StatusOr<Assignment>& reserved = reservation.assignment;
  if (!reserved.ok()) {
    return answer(offering_label, RefusalOutcome(reservation.refusal), -1,
                  absl::StrCat("binding rejected: ", target->node, ": ",
                               reserved.status().message()));
  }

  std::map<std::string, std::string> annotations = impl_->mirror->Read(
      [&](const ClusterState& state) {
        std::map<std::string, std::string> out =
            AssignmentAnnotations(*reserved, state.catalog(), request.project);
        AddDraDeviceAnnotation(state, *reserved, out);
        return out;
      });
  const char* placement = time_sliced ? (reservation.own_unit ? "own_unit" : "new_unit") : "";
  double seconds = 0;
  const BindResult bound = call_binder(annotations, &seconds);
  switch (bound.outcome) {
    case BindOutcome::kBound:
      break;
    case BindOutcome::kNotBound:
      // Definitely not bound: this call's part of the reservation ends. The units are freed
      // only while it is still that reservation (a watch event may have recorded the pod
      // meanwhile) and no other bind of the pod is out or ended unknown.
      impl_->mirror->ReleaseReservation(pod_id, *reserved);
      return failed(bound, seconds);
    case BindOutcome::kUnknown:
      // It may be bound (I1 under API failure): freeing the units could hand them out twice.
      // The holding stays, unconfirmed, until the watch or a relist shows the pod's truth.
      impl_->mirror->MarkUnconfirmed(pod_id);
      return failed(bound, seconds);
  }
  // Confirm can only fail if a watch event already replaced our reservation with the bound
  // pod's recorded assignment, which is the confirmed state anyway.
  (void)impl_->mirror->Confirm(pod_id);
  impl_->pending.Forget(target->pod_uid, target->pod_namespace, target->pod_name);
  if (metrics != nullptr && time_sliced) metrics->ObserveAffinity(offering_label, placement);
  decision.unit_indices = reserved->units;
  decision.amount_per_unit = reserved->amount_per_unit;
  decision.placement = placement;
  return answer(offering_label, "bound", seconds, "");
}

absl::StatusOr<std::string> ExtenderService::DraClaimKey(const BindTarget& target,
                                                         const PodRequest& request) const {
  if (!impl_->options.dra_claim_name) return std::string();
  const bool dra_node = impl_->mirror->Read([&](const ClusterState& state) {
    const NodeState* node = state.FindNode(target.node);
    const NodeOffering* no = node != nullptr ? node->Find(request.offering) : nullptr;
    return state.options().dra && no != nullptr && no->dra;
  });
  if (!dra_node) return std::string();
  absl::StatusOr<std::string> name =
      impl_->options.dra_claim_name(target.pod_namespace, target.pod_name);
  if (!name.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read the pod's extendedResourceClaimStatus: ", name.status().message()));
  }
  if (name->empty()) {
    return absl::FailedPreconditionError(
        "DRA node: the pod's status names no extended-resource claim (kube-scheduler writes it "
        "before bind); not bound, retry");
  }
  return absl::StrCat(target.pod_namespace, "/", *name);
}

VerbResult ExtenderService::RefuseBind(std::string body, absl::string_view outcome,
                                       absl::string_view message) {
  ExtenderMetrics* metrics = impl_->options.metrics;
  if (metrics != nullptr) metrics->ObserveBind(kNoOfferingLabel, outcome, -1);
  const DecisionLog& log = impl_->options.decision_log != nullptr ? *impl_->options.decision_log
                                                                   : DecisionLog::Default();
  if (log.Wants(outcome)) {
    BindDecision decision;
    rapidjson::Document doc;
    if (ParseBody(body, doc).ok()) {
      if (absl::StatusOr<BindTarget> t = DecodeBindArgs(doc); t.ok()) {
        decision.pod_namespace = t->pod_namespace;
        decision.pod_name = t->pod_name;
        decision.pod_uid = t->pod_uid;
        decision.node = t->node;
      }
    }
    decision.offering = std::string(kNoOfferingLabel);
    decision.outcome = std::string(outcome);
    decision.reason = std::string(message);
    log.Log(decision);
  }
  return VerbResult{200, ErrorBody(message), "error"};
}

// ---------------------------------------------------------------- preempt

VerbResult ExtenderService::Preempt(std::string body) {
  auto empty_answer = [](absl::string_view outcome) {
    return VerbResult{200, "{\"NodeNameToMetaVictims\":{}}", std::string(outcome)};
  };
  // An empty map stops kube-scheduler's preemption without an error (PROTOCOL §2.7).
  if (!Ready()) return empty_answer("error");
  rapidjson::Document doc;
  if (absl::Status s = ParseBody(body, doc); !s.ok()) return BadRequest(ErrorBody(s.message()));
  absl::StatusOr<PodObject> pod = DecodePodMember(doc);
  if (!pod.ok()) return BadRequest(ErrorBody(pod.status().message()));
  absl::StatusOr<std::vector<VictimSet>> victims = DecodeVictims(doc);
  if (!victims.ok()) return BadRequest(ErrorBody(victims.status().message()));

  // Nodes are kept when the preemptor fits there once the victims are gone (whether or not
  // they hold GPUs: kube-scheduler may evict them for other resources, so the victim list
  // is echoed unchanged). A node where it still would not fit is dropped, as is any node
  // without victims (the scheduler rejects those).
  std::vector<VictimProposal> proposals;
  std::vector<const VictimSet*> proposed;  // parallel to proposals
  for (const VictimSet& set : *victims) {
    if (set.uids.empty()) continue;
    proposals.push_back(VictimProposal{set.node, &set.uids});
    proposed.push_back(&set);
  }
  const std::vector<bool> fits = impl_->core.Preempt(*pod, proposals);
  std::vector<const VictimSet*> kept;
  for (size_t i = 0; i < proposed.size(); ++i) {
    if (fits[i]) kept.push_back(proposed[i]);
  }

  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  int victim_count = 0;
  w.StartObject();
  w.Key("NodeNameToMetaVictims");
  w.StartObject();
  for (const VictimSet* set : kept) {
    String(w, set->node);
    w.StartObject();
    w.Key("Pods");
    w.StartArray();
    for (const std::string& uid : set->uids) {
      w.StartObject();
      w.Key("UID");
      String(w, uid);
      w.EndObject();
    }
    w.EndArray();
    w.Key("NumPDBViolations");
    w.Int64(set->pdb_violations);
    w.EndObject();
    victim_count += static_cast<int>(set->uids.size());
  }
  w.EndObject();
  w.EndObject();
  if (ExtenderMetrics* m = impl_->options.metrics) {
    m->ObservePreemption(static_cast<int>(kept.size()), victim_count);
  }
  return VerbResult{200, Finish(buf), "ok"};
}

// ---------------------------------------------------------------- debug state

namespace {
// The node label checks of one node (DRA mode): against the label each DeviceClass names
// (kDraNodeLabelAnnotation), a DRA-backed offering on a node without its class's label, and a
// labelled node whose device plugin still advertises a name a labelled class maps (a node
// half way through a migration: it is served as a device-plugin node).
std::vector<std::string> DraLabelProblems(const ClusterState& state,
                                          const std::vector<const DraDeviceClass*>& classes,
                                          const NodeState& node, bool* labelled) {
  std::vector<std::string> out;
  const NodeObject* object = state.DraNodeObject(node.name);
  auto carries = [&](const DraDeviceClass& c) {
    if (object == nullptr || c.node_label_key.empty()) return false;
    auto it = object->labels.find(c.node_label_key);
    return it != object->labels.end() && it->second == c.node_label_value;
  };
  *labelled = false;
  for (const DraDeviceClass* c : classes) *labelled |= carries(*c);
  for (const NodeOffering& no : node.offerings) {
    const std::string& resource = state.catalog().Get(no.offering).resource;
    const DraDeviceClass* c = state.dra().ClassForResource(resource);
    if (c == nullptr || c->node_label_key.empty()) continue;
    const std::string label = absl::StrCat(c->node_label_key, "=", c->node_label_value);
    const DraNodeKind kind = ClusterState::KindOf(node, no.offering);
    if (kind == DraNodeKind::kDra && !carries(*c)) {
      out.push_back(absl::StrCat(resource, " is served from DRA devices, but the node lacks ",
                                 label, " (DeviceClass ", c->name, ")"));
    } else if (kind == DraNodeKind::kDevicePlugin && carries(*c)) {
      out.push_back(absl::StrCat("labelled ", label, ", but the device plugin advertises ", resource,
                                 ": served as a device-plugin node"));
    }
  }
  return out;
}

// /debug/state's "dra" object (DRA mode): the mirrored DRA objects' counts, the catalog drift,
// the classes' node-label annotations that cannot be read, and each node's kind over the
// offerings it has: "device-plugin", "dra", "mixed" (some of each: a node in migration) or
// "none", whether it carries a class's node label, and where label and kind disagree.
void WriteDraDebug(JsonWriter& w, const ClusterState& state,
                   const std::vector<const NodeState*>& nodes) {
  w.Key("dra");
  w.StartObject();
  w.Key("device_classes");
  w.Uint64(state.dra().device_class_count());
  w.Key("resource_slices");
  w.Uint64(state.dra().resource_slice_count());
  w.Key("resource_claims");
  w.Uint64(state.dra().resource_claim_count());
  w.Key("drift");
  w.StartArray();
  for (const std::string& line : state.DraDrift()) String(w, line);
  w.EndArray();
  const std::vector<const DraDeviceClass*> classes = state.dra().DeviceClasses();
  w.Key("class_problems");
  w.StartArray();
  for (const DraDeviceClass* c : classes) {
    if (!c->node_label_problem.empty()) {
      String(w, absl::StrCat("DeviceClass ", c->name, ": ", c->node_label_problem));
    }
  }
  w.EndArray();
  w.Key("nodes");
  w.StartArray();
  for (const NodeState* node : nodes) {
    bool dra = false, plugin = false;
    for (const NodeOffering& no : node->offerings) {
      const DraNodeKind kind = ClusterState::KindOf(*node, no.offering);
      dra |= kind == DraNodeKind::kDra;
      plugin |= kind == DraNodeKind::kDevicePlugin;
    }
    w.StartObject();
    w.Key("node");
    String(w, node->name);
    w.Key("kind");
    String(w, dra && plugin ? "mixed" : dra ? "dra" : plugin ? "device-plugin" : "none");
    bool labelled = false;
    const std::vector<std::string> problems = DraLabelProblems(state, classes, *node, &labelled);
    w.Key("labelled");
    w.Bool(labelled);
    if (!problems.empty()) {
      w.Key("label_problems");
      w.StartArray();
      for (const std::string& p : problems) String(w, p);
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

// /debug/state's "units": every unit of every node, sorted by node and resource, with its
// holders.
void WriteUnitsDebug(JsonWriter& w, const ClusterState& state,
                     const std::vector<const NodeState*>& nodes) {
  const Catalog& catalog = state.catalog();
  auto project_name = [&](ProjectId id) -> std::string {
    return id == kNoProject ? std::string() : state.project(id).name;
  };
  w.Key("units");
  w.StartArray();
  for (const NodeState* node : nodes) {
    std::vector<const NodeOffering*> offerings;
    for (const NodeOffering& no : node->offerings) offerings.push_back(&no);
    std::sort(offerings.begin(), offerings.end(),
              [&](const NodeOffering* a, const NodeOffering* b) {
                return catalog.Get(a->offering).resource < catalog.Get(b->offering).resource;
              });
    for (const NodeOffering* no : offerings) {
      const std::string& resource = catalog.Get(no->offering).resource;
      for (const Unit& unit : no->units) {
        w.StartObject();
        w.Key("id");
        String(w, UnitId(node->name, resource, unit.index));
        w.Key("node");
        String(w, node->name);
        w.Key("resource");
        String(w, resource);
        w.Key("capacity");
        w.Int(unit.capacity);
        w.Key("used");
        w.Int(unit.used);
        w.Key("owner");
        if (unit.owner == kNoProject) {
          w.Null();
        } else {
          String(w, project_name(unit.owner));
        }
        w.Key("draining");
        w.Bool(unit.draining);
        w.Key("kind");
        String(w, DraNodeKindName(ClusterState::KindOf(*node, no->offering)));
        if (no->dra && static_cast<size_t>(unit.index) < no->unit_devices.size()) {
          // DRA-backed: the device (driver/pool/name) and its UUID ("" when it publishes
          // none); user_claim: a user-made ResourceClaim holds it (no new holders).
          w.Key("device");
          String(w, no->unit_devices[static_cast<size_t>(unit.index)]);
          w.Key("uuid");
          String(w, no->unit_uuids[static_cast<size_t>(unit.index)]);
          w.Key("user_claim");
          w.Bool(unit.user_claimed);
          if (!no->dra_problem.empty()) {
            w.Key("dra_problem");
            String(w, no->dra_problem);
          }
        } else if (static_cast<size_t>(unit.index) < no->unit_uuids.size()) {
          // The node agent's published inventory (when trusted): the device and its health.
          w.Key("uuid");
          String(w, no->unit_uuids[static_cast<size_t>(unit.index)]);
          w.Key("healthy");
          w.Bool(!unit.unhealthy);
        }
        if (!no->inventory_problem.empty()) {
          w.Key("inventory_problem");
          String(w, no->inventory_problem);
        }
        if (!no->unusable_reason.empty()) {
          w.Key("unusable");
          String(w, no->unusable_reason);
        }
        std::vector<std::string> holders;
        for (const Holding& h : unit.holders) {
          const PodRecord* rec = state.FindPodById(h.pod_id);
          holders.push_back(rec != nullptr ? rec->key : "?");
        }
        std::sort(holders.begin(), holders.end());
        w.Key("holders");
        w.StartArray();
        for (const std::string& h : holders) String(w, h);
        w.EndArray();
        w.EndObject();
      }
    }
  }
  w.EndArray();
}

// /debug/state's "hosts", the host view (cluster_state.h): per node known or with bound pods,
// its allocatable (null where unknown) and what the bound, non-terminal pods request.
void WriteHostsDebug(JsonWriter& w, const ClusterState& state,
                     const std::vector<const NodeState*>& nodes) {
  std::map<std::string, const NodeState*> hosts;
  for (const NodeState* node : nodes) hosts.emplace(node->name, node);
  for (const auto& [name, sum] : state.host_requested()) hosts.emplace(name, nullptr);
  auto quantity = [&](const char* key, int64_t v) {
    w.Key(key);
    if (v == kHostUnknown) {
      w.Null();
    } else {
      w.Int64(v);
    }
  };
  auto resources = [&](const char* key, const HostResources& r) {
    w.Key(key);
    w.StartObject();
    quantity("cpu_milli", r.cpu_milli);
    quantity("memory_bytes", r.memory_bytes);
    quantity("pods", r.pods);
    w.EndObject();
  };
  w.Key("hosts");
  w.StartArray();
  for (const auto& [name, node] : hosts) {
    w.StartObject();
    w.Key("node");
    String(w, name);
    const HostResources unknown{kHostUnknown, kHostUnknown, kHostUnknown};
    resources("allocatable", node != nullptr ? node->allocatable : unknown);
    resources("requested", state.HostRequested(name));
    w.EndObject();
  }
  w.EndArray();
}

// /debug/state's "recent_host_demand", the window fgd reads (docs/fgd.md "Pods beside the
// GPUs"): decayed sums of the requests of the pods as they arrived on a host, GPU pods and
// the others apart.
void WriteRecentHostDemandDebug(JsonWriter& w, const ClusterState& state) {
  const ClusterState::RecentHostDemand& recent = state.recent_host_demand();
  auto demand = [&](const char* key, double cpu_milli, double memory_bytes) {
    w.Key(key);
    w.StartObject();
    w.Key("cpu_milli");
    w.Int64(std::llround(cpu_milli));
    w.Key("memory_bytes");
    w.Int64(std::llround(memory_bytes));
    w.EndObject();
  };
  w.Key("recent_host_demand");
  w.StartObject();
  demand("gpu_pods", recent.gpu_cpu_milli, recent.gpu_memory_bytes);
  demand("other_pods", recent.other_cpu_milli, recent.other_memory_bytes);
  w.Key("pods_counted");
  w.Int64(recent.arrivals);
  w.EndObject();
}

// /debug/state's "projects": each project that holds units or has a quota, its usage and
// quota per resource.
void WriteProjectsDebug(JsonWriter& w, const ClusterState& state) {
  const Catalog& catalog = state.catalog();
  std::vector<ProjectId> projects;
  for (size_t i = 0; i < state.project_count(); ++i) {
    projects.push_back(static_cast<ProjectId>(i));
  }
  std::sort(projects.begin(), projects.end(), [&](ProjectId a, ProjectId b) {
    return state.project(a).name < state.project(b).name;
  });
  w.Key("projects");
  w.StartArray();
  for (ProjectId id : projects) {
    const ProjectState& p = state.project(id);
    std::map<std::string, OfferingId> offerings;  // sorted by resource
    for (const auto& [off, n] : p.usage) {
      if (n != 0) offerings.emplace(catalog.Get(off).resource, off);
    }
    for (const auto& [off, n] : p.quota) offerings.emplace(catalog.Get(off).resource, off);
    // Projects are interned for good once seen (even by a bind that then failed); one that
    // holds nothing and has no quota entry has nothing to show.
    if (offerings.empty()) continue;
    w.StartObject();
    w.Key("name");
    String(w, p.name);
    auto by_resource = [&](const char* key, auto value_of) {
      w.Key(key);
      w.StartObject();
      for (const auto& [resource, off] : offerings) {
        String(w, resource);
        w.Int64(value_of(off));
      }
      w.EndObject();
    };
    by_resource("units", [&](OfferingId off) { return state.Usage(id, off); });
    by_resource("quota", [&](OfferingId off) { return state.Quota(id, off); });
    w.EndObject();
  }
  w.EndArray();
}

// /debug/state's "agent_nodes": nodes served by a node agent and its liveness (docs/agent.md
// "Agent liveness"): "stale" ones are refused at filter and bind; last_renewal is the agent's
// last heartbeat on our clock as of its last change of state (null: none seen).
void WriteAgentNodesDebug(JsonWriter& w, const std::vector<const NodeState*>& nodes) {
  w.Key("agent_nodes");
  w.StartArray();
  for (const NodeState* node : nodes) {
    if (!node->agent || node->removed) continue;
    w.StartObject();
    w.Key("node");
    String(w, node->name);
    w.Key("agent");
    String(w, node->agent_stale ? "stale" : "live");
    w.Key("last_renewal");
    if (node->agent_last_renewal == absl::InfinitePast()) {
      w.Null();
    } else {
      String(w, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", node->agent_last_renewal,
                                 absl::UTCTimeZone()));
    }
    w.EndObject();
  }
  w.EndArray();
}

// /debug/state's "audit": ClusterState::Audit() of the state as it is now.
void WriteAuditDebug(JsonWriter& w, const ClusterState& state) {
  const AuditReport audit = state.Audit();
  w.Key("audit");
  w.StartObject();
  w.Key("oversubscribed_units");
  w.Int64(audit.oversubscribed_units);
  w.Key("multi_owner_units");
  w.Int64(audit.multi_owner_units);
  w.Key("over_quota_projects");
  w.Int64(audit.over_quota_projects);
  w.Key("problems");
  w.StartArray();
  for (const std::string& p : audit.problems) String(w, p);
  w.EndArray();
  w.EndObject();
}

}  // namespace

std::string ExtenderService::DebugStateJson() const {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  impl_->mirror->Read([&](const ClusterState& state) {
    std::vector<const NodeState*> nodes;
    nodes.reserve(state.nodes().size());
    for (const auto& [name, node] : state.nodes()) nodes.push_back(node.get());
    std::sort(nodes.begin(), nodes.end(),
              [](const NodeState* a, const NodeState* b) { return a->name < b->name; });
    w.StartObject();
    w.Key("ready");
    w.Bool(Ready());
    WriteUnitsDebug(w, state, nodes);
    WriteHostsDebug(w, state, nodes);
    WriteRecentHostDemandDebug(w, state);
    WriteProjectsDebug(w, state);
    WriteAgentNodesDebug(w, nodes);
    if (state.options().dra) WriteDraDebug(w, state, nodes);
    w.Key("nodes");
    w.Uint64(state.nodes().size());
    w.Key("pods");
    w.Uint64(state.pods().size());
    WriteAuditDebug(w, state);
    w.EndObject();
  });
  return Finish(buf);
}

}  // namespace gse
