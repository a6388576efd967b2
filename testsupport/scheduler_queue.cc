// SchedulerQueueSim: see scheduler_queue.h for the kube-scheduler 1.26 rules it plays.
#include "testsupport/scheduler_queue.h"

#include <algorithm>
#include <utility>

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse::testing {
namespace {

using Doc = rapidjson::Document;

std::string Str(const rapidjson::Value& obj, const char* key) {
  if (!obj.IsObject()) return "";
  auto it = obj.FindMember(key);
  return it != obj.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
}

const rapidjson::Value& Section(const rapidjson::Value& obj, const char* key) {
  static const rapidjson::Value kNull;
  if (!obj.IsObject()) return kNull;
  auto it = obj.FindMember(key);
  return it == obj.MemberEnd() ? kNull : it->value;
}

std::string Serialize(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return buf.GetString();
}

// isPodUpdated (scheduling_queue.go): the pods differ once resourceVersion, generation,
// status, managedFields and finalizers are dropped.
std::string StripForUpdate(const std::string& pod_json) {
  Doc doc;
  doc.Parse(pod_json.c_str());
  if (doc.HasParseError() || !doc.IsObject()) return pod_json;
  doc.RemoveMember("status");
  auto meta = doc.FindMember("metadata");
  if (meta != doc.MemberEnd() && meta->value.IsObject()) {
    for (const char* key : {"resourceVersion", "generation", "managedFields", "finalizers"}) {
      meta->value.RemoveMember(key);
    }
  }
  return Serialize(doc);
}

bool IsPodUpdated(const std::string& old_json, const std::string& new_json) {
  return StripForUpdate(old_json) != StripForUpdate(new_json);
}

struct PodFacts {
  std::string key, uid, resource_version, node, scheduler, phase;
  bool terminating = false;
};

PodFacts FactsOf(const rapidjson::Value& pod) {
  PodFacts f;
  const rapidjson::Value& meta = Section(pod, "metadata");
  const rapidjson::Value& spec = Section(pod, "spec");
  f.key = absl::StrCat(Str(meta, "namespace"), "/", Str(meta, "name"));
  f.uid = Str(meta, "uid");
  f.resource_version = Str(meta, "resourceVersion");
  f.terminating = meta.IsObject() && meta.HasMember("deletionTimestamp");
  f.node = Str(spec, "nodeName");
  f.scheduler = Str(spec, "schedulerName");
  if (f.scheduler.empty()) f.scheduler = "default-scheduler";
  f.phase = Str(Section(pod, "status"), "phase");
  return f;
}

std::unique_ptr<httplib::Client> HttpClient(const std::string& base, absl::Duration timeout) {
  auto c = std::make_unique<httplib::Client>(base);
  c->set_tcp_nodelay(true);
  c->set_connection_timeout(1, 0);
  const int64_t us = absl::ToInt64Microseconds(timeout);
  c->set_read_timeout(static_cast<time_t>(us / 1000000), static_cast<time_t>(us % 1000000));
  return c;
}

}  // namespace

const char* PodQueueName(PodQueue q) {
  switch (q) {
    case PodQueue::kNone: return "none";
    case PodQueue::kActive: return "active";
    case PodQueue::kBackoff: return "backoff";
    case PodQueue::kUnschedulable: return "unschedulable";
    case PodQueue::kInFlight: return "in_flight";
    case PodQueue::kAssumed: return "assumed";
    case PodQueue::kBound: return "bound";
  }
  return "?";
}

SchedulerQueueSim::SchedulerQueueSim(SchedulerQueueOptions options) : options_(std::move(options)) {}

SchedulerQueueSim::~SchedulerQueueSim() { Stop(); }

absl::Status SchedulerQueueSim::Start() {
  KubeConfig config;
  config.server = options_.api_url;
  config.token = options_.token;
  absl::StatusOr<std::unique_ptr<KubeClient>> client = KubeClient::Create(config);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  if (absl::Status s = client_->CheckReachable(3, absl::Milliseconds(20)); !s.ok()) return s;
  std::vector<std::string> items;
  absl::StatusOr<std::string> rv = client_->List("/api/v1/pods", [&](const rapidjson::Value& page) {
    for (const auto& item : page["items"].GetArray()) items.push_back(Serialize(item));
    return absl::OkStatus();
  });
  if (!rv.ok()) return rv.status();
  for (const std::string& item : items) HandlePodEvent("ADDED", item);
  // Without this first pass a pod added right after Start() could be tried before the probe
  // thread's first answer and parked as "no endpoints" (seen under ThreadSanitizer's slowness).
  ProbeOnce();
  threads_.emplace_back([this, version = *rv] { InformerLoop(version); });
  threads_.emplace_back([this] {
    while (!Stopping()) LoopOnce();
  });
  threads_.emplace_back([this] { FlushLoop(); });
  threads_.emplace_back([this] { ProbeLoop(); });
  return absl::OkStatus();
}

void SchedulerQueueSim::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stopper_.Stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

bool SchedulerQueueSim::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

PodQueue SchedulerQueueSim::QueueOf(const std::string& pod) const {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(pod);
  if (it != pods_.end()) return it->second.where;
  return bound_.count(pod) != 0 ? PodQueue::kBound : PodQueue::kNone;
}

int SchedulerQueueSim::Attempts(const std::string& pod) const {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(pod);
  return it == pods_.end() ? 0 : it->second.attempts;
}

std::vector<QueueMove> SchedulerQueueSim::Moves(const std::string& pod) const {
  absl::MutexLock lock(&mu_);
  std::vector<QueueMove> out;
  for (const QueueMove& m : moves_) {
    if (pod.empty() || m.pod == pod) out.push_back(m);
  }
  return out;
}

std::string SchedulerQueueSim::LastEndpoint() const {
  absl::MutexLock lock(&mu_);
  return last_endpoint_;
}

// ---------------------------------------------------------------- informer

void SchedulerQueueSim::InformerLoop(std::string resource_version) {
  while (!Stopping()) {
    const std::string path =
        absl::StrCat("/api/v1/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=30",
                     "&resourceVersion=", resource_version);
    absl::Status s = client_->Watch(path, absl::Seconds(60), [&](absl::string_view line) {
      Doc doc;
      doc.Parse(line.data(), line.size());
      if (doc.HasParseError() || !doc.IsObject()) return false;
      const std::string type = Str(doc, "type");
      const rapidjson::Value& object = Section(doc, "object");
      const std::string rv = Str(Section(object, "metadata"), "resourceVersion");
      if (!rv.empty()) resource_version = rv;
      if (type == "ADDED" || type == "MODIFIED" || type == "DELETED") {
        HandlePodEvent(type, Serialize(object));
      }
      return type != "ERROR";
    }, &stopper_);
    if (s.code() == absl::StatusCode::kCancelled) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void SchedulerQueueSim::HandlePodEvent(const std::string& type, const std::string& json) {
  Doc doc;
  doc.Parse(json.c_str());
  if (doc.HasParseError()) return;
  const PodFacts f = FactsOf(doc);
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(f.key);
  if (type == "DELETED") {
    if (it != pods_.end()) {
      MoveLocked(it->second, f.key, PodQueue::kNone, "Deleted");
      pods_.erase(it);
    }
    if (bound_.erase(f.key) != 0) MoveAllLocked("AssignedPodDelete");
    return;
  }
  if (!f.node.empty()) {
    // Assigned: it leaves the scheduling queue (the unassigned handler sees a delete).
    if (it != pods_.end()) {
      MoveLocked(it->second, f.key, PodQueue::kBound, "Bound");
      pods_.erase(it);
    }
    bound_.insert(f.key);
    return;
  }
  if (f.scheduler != options_.scheduler_name || f.phase == "Succeeded" || f.phase == "Failed") {
    return;
  }
  if (it == pods_.end()) {
    Queued q;
    q.json = json;
    q.resource_version = f.resource_version;
    q.uid = f.uid;
    q.timestamp = absl::Now();
    Queued& added = pods_[f.key] = std::move(q);
    MoveLocked(added, f.key, PodQueue::kActive, "PodAdd");
    return;
  }
  Queued& q = it->second;
  if (q.resource_version == f.resource_version) return;  // identical object (#96071)
  if (q.where == PodQueue::kAssumed) return;
  const bool updated = IsPodUpdated(q.json, json);
  q.json = json;
  q.resource_version = f.resource_version;
  switch (q.where) {
    case PodQueue::kActive:
    case PodQueue::kBackoff:
      return;  // updated in place
    case PodQueue::kUnschedulable:
      if (!updated) return;  // "Pod update didn't make it schedulable"
      MoveLocked(q, f.key, BackingOffLocked(q, absl::Now()) ? PodQueue::kBackoff : PodQueue::kActive,
                 "PodUpdate");
      return;
    default:
      // In no queue (being scheduled): a new queued pod info goes to active.
      q.attempts = 0;
      q.timestamp = absl::Now();
      MoveLocked(q, f.key, PodQueue::kActive, "PodUpdate");
      return;
  }
}

// ---------------------------------------------------------------- queue

void SchedulerQueueSim::MoveLocked(Queued& q, const std::string& key, PodQueue to,
                                   const std::string& cause, const std::string& detail) {
  moves_.push_back(QueueMove{absl::Now(), key, q.where, to, cause, detail});
  if (to == PodQueue::kActive) active_.push_back(key);
  q.where = to;
}

bool SchedulerQueueSim::BackingOffLocked(const Queued& q, absl::Time now) const {
  absl::Duration d = options_.initial_backoff;
  for (int i = 1; i < q.attempts; ++i) {
    if (d > options_.max_backoff - d) {
      d = options_.max_backoff;
      break;
    }
    d += d;
  }
  return q.timestamp + d > now;
}

void SchedulerQueueSim::AddUnschedulableIfNotPresentLocked(const std::string& key, int64_t cycle,
                                                           const std::string& detail) {
  auto it = pods_.find(key);
  if (it == pods_.end()) return;  // bound or deleted meanwhile: not re-added
  Queued& q = it->second;
  if (q.where == PodQueue::kActive || q.where == PodQueue::kBackoff ||
      q.where == PodQueue::kUnschedulable) {
    return;  // "already present"
  }
  q.timestamp = absl::Now();
  MoveLocked(q, key, move_request_cycle_ >= cycle ? PodQueue::kBackoff : PodQueue::kUnschedulable,
             "ScheduleAttemptFailure", detail);
}

void SchedulerQueueSim::MoveAllLocked(const std::string& cause) {
  const absl::Time now = absl::Now();
  for (auto& [key, q] : pods_) {
    if (q.where != PodQueue::kUnschedulable) continue;
    MoveLocked(q, key, BackingOffLocked(q, now) ? PodQueue::kBackoff : PodQueue::kActive, cause);
  }
  move_request_cycle_ = scheduling_cycle_;
}

void SchedulerQueueSim::LoopOnce() {
  std::string key, json;
  int64_t cycle = 0;
  {
    absl::MutexLock lock(&mu_);
    while (!active_.empty()) {
      std::string head = active_.front();
      active_.pop_front();
      auto it = pods_.find(head);
      if (it == pods_.end() || it->second.where != PodQueue::kActive) continue;  // stale entry
      Queued& q = it->second;
      ++q.attempts;
      q.cycle = cycle = ++scheduling_cycle_;
      MoveLocked(q, head, PodQueue::kInFlight, "Pop");
      key = head;
      json = q.json;
      break;
    }
  }
  if (key.empty()) {
    absl::SleepFor(absl::Milliseconds(2));
    return;
  }
  bool bind_failed = false;
  const std::string failure = RunCycle(key, json, &bind_failed);
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(key);
  if (it == pods_.end()) return;  // bound (the informer was quicker) or deleted
  Queued& q = it->second;
  if (failure.empty()) {
    if (q.where == PodQueue::kActive) {
      active_.erase(std::remove(active_.begin(), active_.end(), key), active_.end());
    }
    MoveLocked(q, key, PodQueue::kAssumed, "Bound");
    return;
  }
  if (bind_failed) MoveAllLocked("AssignedPodDelete");
  AddUnschedulableIfNotPresentLocked(key, cycle, failure);
}

void SchedulerQueueSim::FlushLoop() {
  absl::Time next_backoff = absl::Now() + options_.backoff_flush_period;
  absl::Time next_leftover = absl::Now() + options_.unschedulable_flush_period;
  while (!Stopping()) {
    absl::SleepFor(absl::Milliseconds(5));
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    if (now >= next_backoff) {
      next_backoff = now + options_.backoff_flush_period;
      for (auto& [key, q] : pods_) {
        if (q.where == PodQueue::kBackoff && !BackingOffLocked(q, now)) {
          MoveLocked(q, key, PodQueue::kActive, "BackoffComplete");
        }
      }
    }
    if (now >= next_leftover) {
      next_leftover = now + options_.unschedulable_flush_period;
      bool moved = false;
      for (auto& [key, q] : pods_) {
        if (q.where == PodQueue::kUnschedulable && now - q.timestamp > options_.max_in_unschedulable) {
          MoveLocked(q, key, BackingOffLocked(q, now) ? PodQueue::kBackoff : PodQueue::kActive,
                     "UnschedulableTimeout");
          moved = true;
        }
      }
      if (moved) move_request_cycle_ = scheduling_cycle_;
    }
  }
}

// ---------------------------------------------------------------- the extender's Service

void SchedulerQueueSim::ProbeOnce() {
  for (const std::string& endpoint : options_.extenders) {
    auto c = HttpClient(endpoint, absl::Seconds(1));
    httplib::Result r = c->Get("/readyz");
    const bool ready = r && r->status == 200;
    absl::MutexLock lock(&mu_);
    endpoint_ready_[endpoint] = ready;
  }
}

void SchedulerQueueSim::ProbeLoop() {
  while (!Stopping()) {
    ProbeOnce();
    for (absl::Time until = absl::Now() + options_.readiness_period; absl::Now() < until;) {
      if (Stopping()) return;
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
}

std::string SchedulerQueueSim::ReadyEndpoint() {
  absl::MutexLock lock(&mu_);
  last_endpoint_.clear();
  for (const std::string& e : options_.extenders) {
    if (endpoint_ready_[e]) {
      last_endpoint_ = e;
      break;
    }
  }
  return last_endpoint_;
}

std::string SchedulerQueueSim::RunCycle(const std::string& key, const std::string& pod_json,
                                        bool* bind_failed) {
  const std::string names = absl::StrCat("[\"", absl::StrJoin(options_.nodes, "\",\""), "\"]");
  auto call = [&](const std::string& verb, const std::string& body, std::string* error) {
    std::string endpoint = ReadyEndpoint();
    if (endpoint.empty()) {
      *error = absl::StrCat(verb, ": no endpoints available for the extender's Service");
      return std::string();
    }
    auto c = HttpClient(endpoint, options_.http_timeout);
    httplib::Result r = c->Post(absl::StrCat("/", verb), body, "application/json");
    if (!r) {
      *error = absl::StrCat(verb, ": ", httplib::to_string(r.error()));
      return std::string();
    }
    if (r->status != 200) {
      *error = absl::StrCat(verb, ": HTTP ", r->status, " ", r->body);
      return std::string();
    }
    return r->body;
  };
  std::string error;
  const std::string args = absl::StrCat(R"({"Pod":)", pod_json, R"(,"Nodes":null,"NodeNames":)",
                                        names, "}");
  const std::string filtered = call("filter", args, &error);
  if (!error.empty()) return error;
  Doc f;
  f.Parse(filtered.c_str());
  if (f.HasParseError() || !f.IsObject()) return "filter: unreadable answer";
  if (!Str(f, "Error").empty()) return Str(f, "Error");
  std::vector<std::string> passing;
  const rapidjson::Value& node_names = Section(f, "NodeNames");
  if (node_names.IsArray()) {
    for (const auto& n : node_names.GetArray()) passing.push_back(n.GetString());
  }
  if (passing.empty()) return absl::StrCat("0/", options_.nodes.size(), " nodes are available");
  // Prioritize errors are ignored by kube-scheduler (the extender's scores count 0).
  std::string chosen = passing.front();
  std::string prio_error;
  const std::string scores = call(
      "prioritize",
      absl::StrCat(R"({"Pod":)", pod_json, R"(,"Nodes":null,"NodeNames":[")",
                   absl::StrJoin(passing, "\",\""), "\"]}"),
      &prio_error);
  Doc p;
  p.Parse(scores.c_str());
  if (prio_error.empty() && !p.HasParseError() && p.IsArray()) {
    int64_t best = -1;
    for (const auto& s : p.GetArray()) {
      if (s.IsObject() && s.HasMember("Score") && s["Score"].IsInt64() && s["Score"].GetInt64() > best) {
        best = s["Score"].GetInt64();
        chosen = Str(s, "Host");
      }
    }
  }
  Doc pod;
  pod.Parse(pod_json.c_str());
  const PodFacts facts = FactsOf(pod);
  const size_t slash = key.find('/');
  const std::string bound = call(
      "bind",
      absl::StrCat(R"({"PodName":")", key.substr(slash + 1), R"(","PodNamespace":")",
                   key.substr(0, slash), R"(","PodUID":")", facts.uid, R"(","Node":")", chosen,
                   R"("})"),
      &error);
  if (error.empty()) {
    Doc b;
    b.Parse(bound.c_str());
    error = b.HasParseError() ? "bind: unreadable answer" : Str(b, "Error");
  }
  *bind_failed = !error.empty();
  return error;
}

}  // namespace gse::testing
