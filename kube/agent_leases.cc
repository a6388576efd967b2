// The node agents' heartbeat Leases: see agent_leases.h.
#include "kube/agent_leases.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/k8s_objects.h"

namespace gse {
namespace {

// A Node name: a DNS subdomain (lower-case alphanumerics, '-', '.'), at most 253 characters,
// alphanumeric at both ends.
bool IsNodeName(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-' && c != '.') return false;
  }
  return absl::ascii_isalnum(s.front()) && absl::ascii_isalnum(s.back());
}

const rapidjson::Value* Member(const rapidjson::Value& obj, const char* key) {
  if (!obj.IsObject()) return nullptr;
  auto it = obj.FindMember(key);
  return it == obj.MemberEnd() ? nullptr : &it->value;
}

std::string Shown(absl::string_view s) {
  // Hostile input is quoted short and printable in errors and logs.
  std::string out;
  for (char c : s.substr(0, 64)) out.push_back(absl::ascii_isprint(c) ? c : '?');
  if (s.size() > 64) out += "...";
  return out;
}

}  // namespace

std::string AgentLeaseName(absl::string_view node) { return absl::StrCat(kAgentLeasePrefix, node); }

absl::StatusOr<std::optional<std::string>> NodeOfAgentLease(absl::string_view name) {
  if (!absl::StartsWith(name, kAgentLeasePrefix)) return std::optional<std::string>();
  const absl::string_view node = name.substr(kAgentLeasePrefix.size());
  if (!IsNodeName(node)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata.name \"", Shown(name), "\": an agent Lease is ", kAgentLeasePrefix,
                     "<node> and \"", Shown(node), "\" is not a Node name"));
  }
  return std::optional<std::string>(std::string(node));
}

std::string FormatLeaseTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

absl::StatusOr<std::optional<AgentLease>> DecodeAgentLease(const rapidjson::Value& object,
                                                           absl::string_view path) {
  auto bad = [&](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", field, ": ", why));
  };
  const rapidjson::Value* meta = Member(object, "metadata");
  const rapidjson::Value* name = meta ? Member(*meta, "name") : nullptr;
  if (name == nullptr || !name->IsString()) return bad("metadata.name", "missing or not a string");
  absl::StatusOr<std::optional<std::string>> node =
      NodeOfAgentLease(absl::string_view(name->GetString(), name->GetStringLength()));
  if (!node.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ".", node.status().message()));
  if (!node->has_value()) return std::optional<AgentLease>();
  AgentLease lease;
  lease.node = **node;
  const rapidjson::Value* spec = Member(object, "spec");
  if (spec == nullptr || !spec->IsObject()) return bad("spec", "missing or not an object");
  if (const rapidjson::Value* h = Member(*spec, "holderIdentity"); h != nullptr && !h->IsNull()) {
    if (!h->IsString()) return bad("spec.holderIdentity", "not a string");
    if (h->GetStringLength() > 1024) return bad("spec.holderIdentity", "longer than 1024 bytes");
    lease.holder.assign(h->GetString(), h->GetStringLength());
  }
  const rapidjson::Value* renew = Member(*spec, "renewTime");
  if (renew == nullptr || renew->IsNull()) {
    return bad("spec.renewTime", "missing (an agent Lease is renewed, never only created)");
  }
  if (!renew->IsString()) return bad("spec.renewTime", "not a string");
  lease.renew_text.assign(renew->GetString(), renew->GetStringLength());
  std::string err;
  if (lease.renew_text.size() > 64 ||
      !absl::ParseTime(absl::RFC3339_full, lease.renew_text, &lease.renew_time, &err) ||
      lease.renew_time == absl::InfinitePast() || lease.renew_time == absl::InfiniteFuture()) {
    return bad("spec.renewTime", absl::StrCat("\"", Shown(lease.renew_text),
                                              "\" is not an RFC 3339 time",
                                              err.empty() ? "" : absl::StrCat(" (", err, ")")));
  }
  return std::optional<AgentLease>(std::move(lease));
}

// ---------------------------------------------------------------- the table

AgentLeaseTable::Entry AgentLeaseTable::Fresh(const AgentLease& lease, absl::Time received) const {
  Entry e;
  e.holder = lease.holder;
  e.renew_text = lease.renew_text;
  e.renewed_at = std::min(received, lease.renew_time + margin_);
  return e;
}

void AgentLeaseTable::Replace(const std::vector<AgentLease>& leases, absl::Time received) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<std::string, Entry> next;
  for (const AgentLease& lease : leases) {
    auto old = entries_.find(lease.node);
    if (old != entries_.end() && old->second.renew_text == lease.renew_text) {
      next[lease.node] = old->second;  // not renewed since we last saw it
    } else if (old != entries_.end()) {
      Entry e = old->second;  // renewed while we did not watch: now
      e.holder = lease.holder;
      e.renew_text = lease.renew_text;
      e.renewed_at = received;
      next[lease.node] = std::move(e);
    } else {
      next[lease.node] = Fresh(lease, received);
    }
  }
  entries_ = std::move(next);
  if (first_list_ == absl::InfinitePast()) first_list_ = received;
  current_ = true;
}

void AgentLeaseTable::Apply(const AgentLease& lease, absl::Time received) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(lease.node);
  if (it == entries_.end()) {
    entries_[lease.node] = Fresh(lease, received);
    return;
  }
  // Any other change (labels, holder alone) is no renewal.
  if (it->second.renew_text != lease.renew_text) it->second.renewed_at = received;
  it->second.holder = lease.holder;
  it->second.renew_text = lease.renew_text;
}

void AgentLeaseTable::Remove(absl::string_view node) {
  absl::MutexLock lock(&mu_);
  entries_.erase(node);
}

void AgentLeaseTable::SetCurrent(bool current) {
  absl::MutexLock lock(&mu_);
  current_ = current;
}

bool AgentLeaseTable::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

absl::Time AgentLeaseTable::LastRenewal(absl::string_view node) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(node);
  return it == entries_.end() ? first_list_ : it->second.renewed_at;
}

std::optional<AgentLeaseTable::Entry> AgentLeaseTable::Find(absl::string_view node) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(node);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

size_t AgentLeaseTable::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

// ---------------------------------------------------------------- the watcher

AgentLeaseWatcher::AgentLeaseWatcher(KubeClient* client, AgentLeaseTable* table,
                                     AgentLeaseWatcherOptions options)
    : client_(client),
      table_(table),
      options_(std::move(options)),
      path_(absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/", options_.lease_namespace,
                         "/leases")) {}

AgentLeaseWatcher::~AgentLeaseWatcher() { Stop(); }

void AgentLeaseWatcher::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void AgentLeaseWatcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stopper_.Stop();
  if (thread_.joinable()) thread_.join();
}

bool AgentLeaseWatcher::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

AgentLeaseCounters AgentLeaseWatcher::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void AgentLeaseWatcher::Log(absl::string_view event, absl::string_view detail) const {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  w.Key("ts");
  w.String(ts.c_str());
  w.Key("component");
  w.String("agent_leases");
  w.Key("event");
  w.String(event.data(), static_cast<rapidjson::SizeType>(event.size()));
  w.Key("detail");
  w.String(detail.data(), static_cast<rapidjson::SizeType>(detail.size()));
  w.EndObject();
  if (options_.log) {
    options_.log(buf.GetString());
  } else {
    std::fprintf(stderr, "%s\n", buf.GetString());
  }
}

void AgentLeaseWatcher::Sleep(absl::Duration d) {
  const absl::Time until = absl::Now() + d;
  while (absl::Now() < until && !stopping()) {
    absl::SleepFor(std::min(absl::Milliseconds(20), until - absl::Now()));
  }
}

absl::StatusOr<std::string> AgentLeaseWatcher::List() {
  std::vector<AgentLease> leases;
  int index = 0;
  const absl::Time received = absl::Now();
  absl::StatusOr<std::string> rv = client_->List(path_, [&](const rapidjson::Value& page) {
    const rapidjson::Value* items = Member(page, "items");
    if (items == nullptr || !items->IsArray()) return absl::DataLossError("LeaseList.items: not an array");
    for (const rapidjson::Value& item : items->GetArray()) {
      absl::StatusOr<std::optional<AgentLease>> lease =
          DecodeAgentLease(item, absl::StrCat("LeaseList.items[", index++, "]"));
      if (!lease.ok()) {
        {
          absl::MutexLock lock(&mu_);
          ++counters_.decode_errors;
        }
        Log("decode_error", lease.status().message());
        continue;
      }
      if (lease->has_value()) leases.push_back(**std::move(lease));
    }
    return absl::OkStatus();
  });
  if (!rv.ok()) return rv.status();
  table_->Replace(leases, received);
  absl::MutexLock lock(&mu_);
  ++counters_.lists;
  return rv;
}

bool AgentLeaseWatcher::HandleLine(absl::string_view line, std::string* rv, bool* relist,
                                   bool* broken) {
  rapidjson::Document doc;
  std::string type;
  absl::StatusOr<const rapidjson::Value*> parsed = ParseWatchEventLine(line, doc, &type);
  if (!parsed.ok()) {
    *broken = true;
    return false;
  }
  const rapidjson::Value& object = **parsed;
  if (type == "ERROR") {
    const rapidjson::Value* code = Member(object, "code");
    const rapidjson::Value* reason = Member(object, "reason");
    if ((code != nullptr && code->IsInt() && code->GetInt() == 410) ||
        (reason != nullptr && reason->IsString() && std::string(reason->GetString()) == "Expired")) {
      *relist = true;
    } else {
      *broken = true;
    }
    return false;
  }
  const rapidjson::Value* meta = Member(object, "metadata");
  const rapidjson::Value* v = meta ? Member(*meta, "resourceVersion") : nullptr;
  const std::string next_rv = v != nullptr && v->IsString() ? v->GetString() : "";
  if (type == "BOOKMARK") {
    if (!next_rv.empty()) *rv = next_rv;
    table_->SetCurrent(true);
    return true;
  }
  if (type != "ADDED" && type != "MODIFIED" && type != "DELETED") {
    *broken = true;
    return false;
  }
  absl::StatusOr<std::optional<AgentLease>> lease =
      DecodeAgentLease(object, absl::StrCat("watch leases ", type, " event.object"));
  if (!lease.ok()) {
    // Nothing changes for that node: its last good renewal stands (and ages).
    {
      absl::MutexLock lock(&mu_);
      ++counters_.decode_errors;
    }
    Log("decode_error", lease.status().message());
  } else if (lease->has_value()) {
    if (type == "DELETED") {
      table_->Remove((*lease)->node);
    } else {
      table_->Apply(**lease, absl::Now());
    }
    absl::MutexLock lock(&mu_);
    ++counters_.events;
  }
  table_->SetCurrent(true);
  if (!next_rv.empty()) *rv = next_rv;
  return true;
}

void AgentLeaseWatcher::Run() {
  std::mt19937_64 rng(std::random_device{}());
  absl::Duration backoff = options_.backoff_initial;
  std::string rv;
  bool need_list = true;
  while (!stopping()) {
    if (need_list) {
      absl::StatusOr<std::string> listed = List();
      if (!listed.ok()) {
        table_->SetCurrent(false);
        {
          absl::MutexLock lock(&mu_);
          ++counters_.api_errors;
        }
        Log("list_failed", listed.status().message());
        Sleep(backoff * std::uniform_real_distribution<double>(1.0, 1.5)(rng));
        backoff = std::min(backoff * 2, options_.backoff_max);
        continue;
      }
      rv = *listed;
      need_list = false;
      backoff = options_.backoff_initial;
    }
    const double jitter = std::uniform_real_distribution<double>(1.0, 2.0)(rng);
    const int64_t seconds =
        std::max<int64_t>(1, absl::ToInt64Seconds(options_.watch_timeout * jitter));
    bool relist = false;
    bool broken = false;
    const absl::Status s = client_->Watch(
        absl::StrCat(path_, "?watch=1&allowWatchBookmarks=true&resourceVersion=", rv,
                     "&timeoutSeconds=", seconds),
        absl::Seconds(seconds) + absl::Seconds(30),
        [&](absl::string_view line) { return HandleLine(line, &rv, &relist, &broken); }, &stopper_);
    if (stopping()) return;
    if (relist || IsExpired(s)) {
      need_list = true;
      continue;
    }
    if (s.ok() && !broken) continue;  // the server ended the watch at timeoutSeconds
    table_->SetCurrent(false);
    {
      absl::MutexLock lock(&mu_);
      ++counters_.api_errors;
    }
    Log("watch_failed", broken ? "corrupt or error event" : s.message());
    Sleep(backoff * std::uniform_real_distribution<double>(1.0, 1.5)(rng));
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

}  // namespace gse
