// KubeReflector: see kube_reflector.h for the contract.
//
// Why the whole watch set stops for a relist: the four kinds feed one ClusterState, and
// resourceVersions are opaque (never compared as numbers), so an event that was in flight
// while the relist ran cannot be told apart from a newer one. Stopping every watch, relisting
// and restarting each watch at its new list's resourceVersion loses nothing (the list holds
// everything up to it, the watch everything after it) and never applies an older event on top
// of a newer list.
#include "kube/kube_reflector.h"

#include <cstdio>
#include <map>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/assignment.h"
#include "state/dra_objects.h"
#include "state/k8s_objects.h"

namespace gse {
namespace {

// Jitter source, one per thread. (absl's BitGen seeds from a pool inside Debian's uninstrumented
// Abseil, which ThreadSanitizer reports as a race when two threads seed at once.)
class Jitter {
 public:
  Jitter() : rng_(std::random_device{}()) {}
  double Uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }

 private:
  std::mt19937_64 rng_;
};

constexpr const char* kPaths[] = {"/api/v1/nodes",
                                  "/api/v1/pods",
                                  "/api/v1/namespaces",
                                  "/api/v1/resourcequotas",
                                  "/apis/resource.k8s.io/v1/deviceclasses",
                                  "/apis/resource.k8s.io/v1/resourceslices",
                                  "/apis/resource.k8s.io/v1/resourceclaims"};
constexpr const char* kListKinds[] = {"NodeList",        "PodList",           "NamespaceList",
                                      "ResourceQuotaList", "DeviceClassList", "ResourceSliceList",
                                      "ResourceClaimList"};
constexpr const char* kKindNames[] = {"nodes",          "pods",           "namespaces",
                                      "resourcequotas", "deviceclasses",  "resourceslices",
                                      "resourceclaims"};
static_assert(sizeof(kKindNames) == sizeof(ReflectorCounters::kKinds) &&
                  KubeReflector::kKindCount == 7,
              "ReflectorCounters::kKinds follows KubeReflector::Kind");

std::string JsonLine(std::initializer_list<std::pair<const char*, std::string>> fields) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("ts");
  std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  w.String(ts.c_str(), static_cast<rapidjson::SizeType>(ts.size()));
  w.Key("component");
  w.String("kube_reflector");
  for (const auto& [k, v] : fields) {
    w.Key(k);
    w.String(v.c_str(), static_cast<rapidjson::SizeType>(v.size()));
  }
  w.EndObject();
  return buf.GetString();
}

std::string StringMember(const rapidjson::Value& obj, const char* key) {
  if (!obj.IsObject()) return "";
  auto it = obj.FindMember(key);
  return it != obj.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
}

// metadata.{name,namespace,uid,resourceVersion} without full decoding (deletes, bookmarks).
struct Meta {
  std::string name, namespace_name, uid, resource_version;
};
Meta MetaOf(const rapidjson::Value& object) {
  Meta m;
  if (!object.IsObject()) return m;
  auto md = object.FindMember("metadata");
  if (md == object.MemberEnd() || !md->value.IsObject()) return m;
  m.name = StringMember(md->value, "name");
  m.namespace_name = StringMember(md->value, "namespace");
  m.uid = StringMember(md->value, "uid");
  m.resource_version = StringMember(md->value, "resourceVersion");
  return m;
}

// What a relist compares, per object, as a printable description.
struct Snapshot {
  // "<namespace/name>\x01<uid>" -> holding: per UID, as the mirror keeps pods (names and
  // UIDs contain no control character).
  std::map<std::string, std::string> pods;
  std::map<std::string, std::string> nodes;     // name -> fingerprint
  std::map<std::string, std::string> projects;  // name -> quotas
};

absl::string_view SourceName(HoldingSource s) {
  switch (s) {
    case HoldingSource::kReserved:
      return "reserved";
    case HoldingSource::kConfirmed:
      return "confirmed";
    case HoldingSource::kCharged:
      return "charged";
  }
  return "?";
}

Snapshot TakeSnapshot(const ClusterState& state) {
  Snapshot s;
  for (const auto& [id, pod] : state.pods()) {
    // Reservations of binds in flight are kept by ReplaceAll and are not API facts.
    if (pod.source == HoldingSource::kReserved) continue;
    const Assignment& a = pod.assignment;
    std::string resource = a.offering == kNoOffering || a.offering >= static_cast<OfferingId>(state.catalog().size())
                               ? "-"
                               : state.catalog().Get(a.offering).resource;
    s.pods[absl::StrCat(pod.key, "\x01", pod.uid)] = absl::StrCat(a.node, "/", resource, "/", absl::StrJoin(a.units, ","), " x",
                               a.amount_per_unit, " ", SourceName(pod.source));
  }
  for (const auto& [name, node] : state.nodes()) {
    s.nodes[name] = absl::StrCat(absl::Hex(node->fingerprint), node->removed ? " removed" : "");
  }
  for (size_t i = 0; i < state.project_count(); ++i) {
    const ProjectState& p = state.project(static_cast<ProjectId>(i));
    std::map<std::string, int64_t> q;
    for (const auto& [off, v] : p.quota) {
      q[off >= 0 && off < static_cast<OfferingId>(state.catalog().size()) ? state.catalog().Get(off).resource
                                                                         : absl::StrCat(off)] = v;
    }
    if (!q.empty()) s.projects[p.name] = absl::StrJoin(q, ",", absl::PairFormatter("="));
  }
  return s;
}

// spec.nodeName never goes back to empty for the same pod (UID): a pending, live pod that the
// mirror already holds with that UID is a state from before our own bind, still in flight on
// the watch (or in a list older than the bind). Applying it would release the holding and
// show the unit as free until the bound state arrives; kube-scheduler's cache keeps such
// "assumed" pods for the same reason.
bool IsStaleUnboundPod(const ClusterState& state, const PodObject& pod) {
  if (!pod.node_name.empty() || pod.Terminal() || pod.terminating) return false;
  return !pod.uid.empty() && state.FindPodByUid(pod.uid) != nullptr;
}

}  // namespace

struct KubeReflector::Listed {
  ObjectBatch batch;
  DraObjectBatch dra;  // DRA mode
  std::string resource_versions[kKindCount];
  // When the first list request was sent: everything committed before shows in the lists.
  absl::Time listed_at = absl::InfinitePast();
};

KubeReflector::KubeReflector(KubeClient* client, Mirror* mirror, ReflectorOptions options)
    : client_(client), mirror_(mirror), options_(std::move(options)) {}

KubeReflector::~KubeReflector() { Stop(); }

void KubeReflector::Start() {
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  runner_ = std::thread([this] { Run(); });
}

void KubeReflector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (runner_.joinable()) runner_.join();
}

bool KubeReflector::synced() const {
  absl::MutexLock lock(&mu_);
  return counters_.synced;
}

bool KubeReflector::WaitUntil(const std::function<bool()>& pred, absl::Time deadline) const {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (pred()) return true;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    absl::SleepFor(std::min(absl::Milliseconds(5), deadline - now));
  }
}

bool KubeReflector::WaitForSync(absl::Duration timeout) const {
  return WaitUntil([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return counters_.synced; },
                   absl::Now() + timeout);
}

bool KubeReflector::WaitForRelists(int64_t n, absl::Duration timeout) const {
  return WaitUntil([this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return counters_.relists >= n; },
                   absl::Now() + timeout);
}

int64_t KubeReflector::RequestResync() {
  absl::MutexLock lock(&mu_);
  resync_requested_ = true;
  return lists_sent_ + 1;
}

ReflectorCounters KubeReflector::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void KubeReflector::Count(int64_t ReflectorCounters::*field, int64_t n) {
  absl::MutexLock lock(&mu_);
  counters_.*field += n;
}

void KubeReflector::Log(const std::string& json_line) const {
  if (options_.log) {
    options_.log(json_line);
  } else {
    std::fprintf(stderr, "%s\n", json_line.c_str());
  }
}

void KubeReflector::SleepUnlessStopped(absl::Duration d, const WatchStopper* stopper) {
  absl::Time until = absl::Now() + d;
  while (absl::Now() < until) {
    if (stopper != nullptr && stopper->stopped()) return;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    absl::SleepFor(std::min(absl::Milliseconds(20), until - absl::Now()));
  }
}

absl::Status KubeReflector::ListAll(Listed* out) {
  out->listed_at = absl::Now();
  for (int k = 0; k < KindCount(); ++k) {
    int index = 0;
    auto on_page = [&](const rapidjson::Value& page) -> absl::Status {
      const rapidjson::Value& items = page["items"];
      if (!items.IsArray()) {
        return absl::DataLossError(absl::StrCat(kListKinds[k], ".items: not an array"));
      }
      for (const rapidjson::Value& item : items.GetArray()) {
        std::string path = absl::StrCat(kListKinds[k], ".items[", index++, "]");
        absl::Status s;
        switch (static_cast<Kind>(k)) {
          case kNodes: {
            auto o = DecodeNode(item, path);
            if (o.ok()) out->batch.nodes.push_back(*std::move(o)); else s = o.status();
            break;
          }
          case kPods: {
            auto o = DecodePod(item, path);
            if (o.ok()) out->batch.pods.push_back(*std::move(o)); else s = o.status();
            break;
          }
          case kNamespaces: {
            auto o = DecodeNamespace(item, path);
            if (o.ok()) out->batch.namespaces.push_back(*std::move(o)); else s = o.status();
            break;
          }
          case kQuotas: {
            auto o = DecodeResourceQuota(item, path);
            if (o.ok()) out->batch.quotas.push_back(*std::move(o)); else s = o.status();
            break;
          }
          case kDeviceClasses: {
            auto o = DecodeDeviceClass(item, path);
            if (o.ok()) out->dra.device_classes.push_back(*std::move(o)); else s = o.status();
            break;
          }
          case kResourceSlices: {
            auto o = DecodeResourceSlice(item, path);
            if (o.ok()) out->dra.resource_slices.push_back(*std::move(o)); else s = o.status();
            break;
          }
          case kResourceClaims: {
            auto o = DecodeResourceClaim(item, path);
            if (o.ok()) out->dra.resource_claims.push_back(*std::move(o)); else s = o.status();
            break;
          }
          default:
            break;
        }
        if (!s.ok()) {
          // One malformed object must not block the whole sync: skip it, say so.
          Count(&ReflectorCounters::decode_errors);
          Log(JsonLine({{"event", "decode_error"}, {"error", std::string(s.message())}}));
        }
      }
      return absl::OkStatus();
    };
    absl::StatusOr<std::string> rv = client_->List(kPaths[k], on_page);
    if (!rv.ok()) return rv.status();
    out->resource_versions[k] = *rv;
  }
  return absl::OkStatus();
}

void KubeReflector::ApplyList(const Listed& listed, absl::string_view cause) {
  Snapshot before = mirror_->Read([](const ClusterState& s) { return TakeSnapshot(s); });
  // A list that started before one of our binds committed shows that pod pending. Our bind is
  // newer than the list: keep it, by presenting the pod as bound with its assignment (the
  // watch from this list's resourceVersion brings the real bound state right after).
  // Reservations still in flight are carried over by ReplaceAll itself.
  const ObjectBatch* batch = &listed.batch;
  ObjectBatch patched;
  int64_t kept = 0;
  mirror_->Read([&](const ClusterState& s) {
    for (size_t i = 0; i < listed.batch.pods.size(); ++i) {
      const PodObject& pod = listed.batch.pods[i];
      if (!IsStaleUnboundPod(s, pod)) continue;
      const PodRecord* held = s.FindPodByUid(pod.uid);
      if (held->source == HoldingSource::kReserved) continue;
      if (batch == &listed.batch) {
        patched = listed.batch;
        batch = &patched;
      }
      PodObject& p = patched.pods[i];
      p.node_name = held->assignment.node;
      for (auto& [k, v] : AssignmentAnnotations(held->assignment, s.catalog(),
                                                held->project == kNoProject ? "" : s.project(held->project).name)) {
        p.annotations[k] = v;
      }
      ++kept;
    }
  });
  if (kept > 0) Count(&ReflectorCounters::stale_pod_events, kept);
  mirror_->ReplaceAll(*batch, listed.listed_at, options_.dra ? &listed.dra : nullptr);
  Snapshot after = mirror_->Read([](const ClusterState& s) { return TakeSnapshot(s); });
  if (cause == "initial") return;  // nothing to repair on the first fill
  int64_t repairs = 0;
  auto diff = [&](const char* kind, const std::map<std::string, std::string>& b,
                  const std::map<std::string, std::string>& a) -> int64_t {
    const int64_t before_diff = repairs;
    auto bi = b.begin();
    auto ai = a.begin();
    while (bi != b.end() || ai != a.end()) {
      std::string key, was, now;
      if (ai == a.end() || (bi != b.end() && bi->first < ai->first)) {
        key = bi->first, was = bi->second, now = "(absent)";
        ++bi;
      } else if (bi == b.end() || ai->first < bi->first) {
        key = ai->first, was = "(absent)", now = ai->second;
        ++ai;
      } else {
        key = ai->first, was = bi->second, now = ai->second;
        ++ai, ++bi;
        if (was == now) continue;
      }
      ++repairs;
      const size_t cut = key.find('\x01');  // pods: the UID after the key
      const std::string uid = cut == std::string::npos ? "" : key.substr(cut + 1);
      if (cut != std::string::npos) key.resize(cut);
      Log(JsonLine({{"event", "drift_repair"}, {"cause", std::string(cause)}, {"kind", kind},
                    {"key", key}, {"uid", uid}, {"mirror", was}, {"api", now}}));
    }
    return repairs - before_diff;
  };
  Count(&ReflectorCounters::pod_repairs, diff("pod", before.pods, after.pods));
  Count(&ReflectorCounters::node_repairs, diff("node", before.nodes, after.nodes));
  Count(&ReflectorCounters::project_quota_repairs,
        diff("project_quota", before.projects, after.projects));
  Count(&ReflectorCounters::drift_repairs, repairs);
}

void KubeReflector::Run() {
  Jitter rng;
  absl::Duration backoff = options_.backoff_initial;
  bool first = true;
  std::string cause = "initial";
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    int64_t list_number = 0;
    {
      // A request from here on is answered by the next list: this one may predate its write.
      absl::MutexLock lock(&mu_);
      list_number = ++lists_sent_;
      resync_requested_ = false;
    }
    Listed listed;
    if (absl::Status s = ListAll(&listed); !s.ok()) {
      Count(&ReflectorCounters::api_errors);
      Count(&ReflectorCounters::list_errors);
      Log(JsonLine({{"event", "list_failed"}, {"error", std::string(s.message())}}));
      SleepUnlessStopped(backoff * rng.Uniform(1.0, 1.5), nullptr);
      backoff = std::min(backoff * 2, options_.backoff_max);
      continue;
    }
    backoff = options_.backoff_initial;
    ApplyList(listed, cause);
    bool call_synced = false;
    if (first) {
      Log(JsonLine({{"event", "synced"},
                    {"nodes", absl::StrCat(listed.batch.nodes.size())},
                    {"pods", absl::StrCat(listed.batch.pods.size())}}));
    }
    {
      absl::MutexLock lock(&mu_);
      call_synced = !counters_.synced;
      counters_.synced = true;
      counters_.last_sync = absl::Now();
      if (!first) ++counters_.relists;
      relist_needed_ = false;
    }
    if (call_synced && options_.on_synced) options_.on_synced();
    if (options_.on_listed) options_.on_listed(list_number);
    first = false;

    std::vector<std::unique_ptr<WatchStopper>> stoppers;
    std::vector<std::thread> watchers;
    for (int k = 0; k < KindCount(); ++k) {
      stoppers.push_back(std::make_unique<WatchStopper>());
      watchers.emplace_back([this, k, rv = listed.resource_versions[k], st = stoppers.back().get()] {
        WatchLoop(static_cast<Kind>(k), rv, st);
      });
    }
    absl::Time resync_at = options_.resync_period > absl::ZeroDuration()
                               ? absl::Now() + options_.resync_period
                               : absl::InfiniteFuture();
    WaitUntil([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return stopping_ || relist_needed_ || resync_requested_;
    }, resync_at);
    {
      absl::MutexLock lock(&mu_);
      cause = stopping_ ? "stop" : relist_needed_ ? "expired" : "resync";
    }
    for (auto& st : stoppers) st->Stop();
    for (auto& t : watchers) t.join();
  }
}

void KubeReflector::WatchLoop(Kind kind, std::string resource_version, WatchStopper* stopper) {
  Jitter rng;
  absl::Duration backoff = options_.backoff_initial;
  bool first = true;
  while (!stopper->stopped()) {
    if (!first) {
      absl::MutexLock lock(&mu_);
      ++counters_.watch_restarts;
      ++counters_.watch_restarts_by_kind[static_cast<size_t>(kind)];
    }
    first = false;
    absl::Duration timeout = options_.watch_timeout * rng.Uniform(1.0, 2.0);
    int64_t seconds = std::max<int64_t>(1, absl::ToInt64Seconds(timeout));
    std::string path = absl::StrCat(kPaths[kind], "?watch=1&allowWatchBookmarks=true",
                                    "&resourceVersion=", resource_version,
                                    "&timeoutSeconds=", seconds);
    bool relist = false;
    bool corrupt = false;
    bool got_event = false;
    absl::Status s = client_->Watch(
        path, absl::Seconds(seconds) + absl::Seconds(30),
        [&](absl::string_view line) {
          got_event = true;
          return HandleLine(kind, line, &resource_version, &relist, &corrupt);
        },
        stopper);
    if (stopper->stopped()) return;
    if (relist || IsExpired(s)) {
      // The resourceVersion is compacted: only a relist can catch up.
      Count(&ReflectorCounters::expired);
      Log(JsonLine({{"event", "watch_expired"}, {"kind", kKindNames[kind]},
                    {"resourceVersion", resource_version}}));
      absl::MutexLock lock(&mu_);
      relist_needed_ = true;
      return;  // Run() stops this stopper and restarts every watch after the relist
    }
    if (got_event && !corrupt) backoff = options_.backoff_initial;
    if (s.ok() && !corrupt) continue;  // the server ended the watch at timeoutSeconds
    Count(&ReflectorCounters::api_errors);
    Count(&ReflectorCounters::watch_errors);
    Log(JsonLine({{"event", "watch_error"}, {"kind", kKindNames[kind]},
                  {"resourceVersion", resource_version},
                  {"error", corrupt ? "corrupt event line" : std::string(s.message())}}));
    SleepUnlessStopped(backoff * rng.Uniform(1.0, 1.5), stopper);
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

bool KubeReflector::HandleLine(Kind kind, absl::string_view line, std::string* resource_version,
                               bool* relist, bool* corrupt) {
  rapidjson::Document doc;
  std::string type;
  const absl::StatusOr<const rapidjson::Value*> parsed = ParseWatchEventLine(line, doc, &type);
  if (!parsed.ok()) {
    // A truncated, garbled or not strictly JSON line: the stream is broken; re-watch from the
    // last good resourceVersion, which replays this event.
    *corrupt = true;
    return false;
  }
  const rapidjson::Value& object = **parsed;
  if (type == "ERROR") {
    auto code = object.FindMember("code");
    int c = code != object.MemberEnd() && code->value.IsInt() ? code->value.GetInt() : 0;
    if (c == 410 || StringMember(object, "reason") == "Expired") {
      *relist = true;
      return false;
    }
    Log(JsonLine({{"event", "watch_error_event"}, {"kind", kKindNames[kind]},
                  {"reason", StringMember(object, "reason")},
                  {"message", StringMember(object, "message")}}));
    *corrupt = true;  // reconnect with backoff
    return false;
  }
  Meta meta = MetaOf(object);
  {
    absl::MutexLock lock(&mu_);
    counters_.last_event = absl::Now();
  }
  if (type == "BOOKMARK") {
    if (!meta.resource_version.empty()) *resource_version = meta.resource_version;
    return true;
  }
  bool deleted = type == "DELETED";
  if (!deleted && type != "ADDED" && type != "MODIFIED") {
    *corrupt = true;
    return false;
  }
  std::string path = absl::StrCat("watch ", kKindNames[kind], " ", type, " event.object");
  absl::Status status;
  switch (kind) {
    case kNodes:
      if (deleted) {
        mirror_->Write([&](ClusterState& s) { s.RemoveNode(meta.name); });
      } else if (auto o = DecodeNode(object, path); o.ok()) {
        mirror_->Write([&](ClusterState& s) { s.ApplyNode(*o); });
      } else {
        status = o.status();
      }
      break;
    case kPods:
      if (deleted) {
        // By UID: the deletion of an old pod never removes a recreated one of the same name.
        std::string key = absl::StrCat(meta.namespace_name, "/", meta.name);
        mirror_->Write([&](ClusterState& s) { s.RemovePod(meta.uid, key); });
      } else if (auto o = DecodePod(object, path); o.ok()) {
        bool stale = false;
        mirror_->Write([&](ClusterState& s) {
          stale = IsStaleUnboundPod(s, *o);
          if (!stale) s.ApplyPod(*o);
        });
        if (stale) Count(&ReflectorCounters::stale_pod_events);
      } else {
        status = o.status();
      }
      break;
    case kNamespaces:
      if (deleted) {
        mirror_->Write([&](ClusterState& s) { s.RemoveNamespace(meta.name); });
      } else if (auto o = DecodeNamespace(object, path); o.ok()) {
        mirror_->Write([&](ClusterState& s) { s.ApplyNamespace(*o); });
      } else {
        status = o.status();
      }
      break;
    case kQuotas:
      if (deleted) {
        mirror_->Write([&](ClusterState& s) { s.RemoveQuota(meta.namespace_name, meta.name); });
      } else if (auto o = DecodeResourceQuota(object, path); o.ok()) {
        mirror_->Write([&](ClusterState& s) { s.ApplyQuota(*o); });
      } else {
        status = o.status();
      }
      break;
    case kDeviceClasses:
    case kResourceSlices:
    case kResourceClaims:
      status = ApplyDraEvent(kind, deleted, object, meta.name, meta.namespace_name, path);
      break;
    default:
      break;
  }
  if (!status.ok()) {
    Count(&ReflectorCounters::decode_errors);
    Log(JsonLine({{"event", "decode_error"}, {"error", std::string(status.message())}}));
  } else {
    Count(&ReflectorCounters::events_applied);
  }
  if (!meta.resource_version.empty()) *resource_version = meta.resource_version;
  return true;
}

absl::Status KubeReflector::ApplyDraEvent(Kind kind, bool deleted, const rapidjson::Value& object,
                                          absl::string_view name,
                                          absl::string_view namespace_name,
                                          absl::string_view path) {
  // Decoded before the writer lock: a refused object changes nothing.
  switch (kind) {
    case kDeviceClasses: {
      if (deleted) {
        mirror_->Write([&](ClusterState& s) { s.RemoveDeviceClass(name); });
        return absl::OkStatus();
      }
      auto o = DecodeDeviceClass(object, path);
      if (!o.ok()) return o.status();
      mirror_->Write([&](ClusterState& s) { s.ApplyDeviceClass(*std::move(o)); });
      return absl::OkStatus();
    }
    case kResourceSlices: {
      if (deleted) {
        mirror_->Write([&](ClusterState& s) { s.RemoveResourceSlice(name); });
        return absl::OkStatus();
      }
      auto o = DecodeResourceSlice(object, path);
      if (!o.ok()) return o.status();
      mirror_->Write([&](ClusterState& s) { s.ApplyResourceSlice(*std::move(o)); });
      return absl::OkStatus();
    }
    case kResourceClaims: {
      if (deleted) {
        const std::string key = absl::StrCat(namespace_name, "/", name);
        mirror_->Write([&](ClusterState& s) { s.RemoveResourceClaim(key); });
        return absl::OkStatus();
      }
      auto o = DecodeResourceClaim(object, path);
      if (!o.ok()) return o.status();
      mirror_->Write([&](ClusterState& s) { s.ApplyResourceClaim(*std::move(o)); });
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
}

}  // namespace gse
