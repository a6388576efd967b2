// ApiPodSource: list + watch of the node's pods; see api_pod_source.h for the contract.
#include "agent/api_pod_source.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/agent_log.h"
#include "rapidjson/document.h"

namespace gse::agent {
namespace {

std::string StringMember(const rapidjson::Value& obj, const char* key) {
  if (!obj.IsObject()) return "";
  auto it = obj.FindMember(key);
  return it != obj.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
}

// namespace/name of an object, without full decoding (deletes, bookmarks, bad pods).
std::string KeyOf(const rapidjson::Value& object) {
  if (!object.IsObject()) return "";
  auto md = object.FindMember("metadata");
  if (md == object.MemberEnd()) return "";
  const std::string ns = StringMember(md->value, "namespace");
  const std::string name = StringMember(md->value, "name");
  return ns.empty() || name.empty() ? "" : absl::StrCat(ns, "/", name);
}

std::string ResourceVersionOf(const rapidjson::Value& object) {
  if (!object.IsObject()) return "";
  auto md = object.FindMember("metadata");
  return md == object.MemberEnd() ? "" : StringMember(md->value, "resourceVersion");
}

// Percent-encodes what may not appear raw in a query value (node names are DNS subdomains,
// so in practice only the '=' of the selector).
std::string QueryEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, "%", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace

std::string ApiPodSource::PodsPath(const std::string& node) {
  return absl::StrCat("/api/v1/pods?fieldSelector=", QueryEscape(absl::StrCat("spec.nodeName=", node)));
}

ApiPodSource::ApiPodSource(KubeClient* client, ApiPodSourceOptions options)
    : client_(client), options_(std::move(options)), path_(PodsPath(options_.node)) {}

ApiPodSource::~ApiPodSource() { Stop(); }

void ApiPodSource::Start() {
  runner_ = std::thread([this] { Run(); });
}

void ApiPodSource::Stop() {
  std::shared_ptr<WatchStopper> stopper;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stopper = watch_stopper_;
  }
  if (stopper) stopper->Stop();
  if (runner_.joinable()) runner_.join();
}

bool ApiPodSource::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void ApiPodSource::SleepUnlessStopping(absl::Duration d) const {
  int64_t wanted_at_start;
  {
    absl::MutexLock lock(&mu_);
    wanted_at_start = resync_wanted_;
  }
  for (absl::Time until = absl::Now() + d; absl::Now() < until;) {
    {
      absl::MutexLock lock(&mu_);
      // A Resync caller is waiting: retry now rather than after the backoff.
      if (stopping_ || resync_wanted_ != wanted_at_start) return;
    }
    absl::SleepFor(std::min(absl::Milliseconds(5), until - absl::Now()));
  }
}

bool ApiPodSource::WaitForSync(absl::Duration timeout) const {
  for (absl::Time until = absl::Now() + timeout;;) {
    {
      absl::MutexLock lock(&mu_);
      if (counters_.synced) return true;
    }
    if (absl::Now() >= until) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
}

std::vector<NodePod> ApiPodSource::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<NodePod> out;
  out.reserve(pods_.size());
  for (const auto& [key, pod] : pods_) out.push_back(pod);
  return out;
}

PodSourceCounters ApiPodSource::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

absl::Status ApiPodSource::Resync(absl::Duration timeout) {
  int64_t want;
  std::shared_ptr<WatchStopper> stopper;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("the pod source is stopping");
    want = ++resync_wanted_;
    stopper = watch_stopper_;
  }
  if (stopper) stopper->Stop();  // the runner lists again as soon as the watch returns
  for (absl::Time until = absl::Now() + timeout;;) {
    {
      absl::MutexLock lock(&mu_);
      if (list_done_for_ >= want) return absl::OkStatus();
      if (stopping_) return absl::CancelledError("the pod source is stopping");
    }
    if (absl::Now() >= until) {
      return absl::DeadlineExceededError(
          absl::StrCat("no fresh list of node ", options_.node, "'s pods within ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::StatusOr<std::string> ApiPodSource::ListAndReplace(int64_t list_for) {
  std::map<std::string, NodePod> fresh;
  int64_t rejected = 0;
  absl::StatusOr<std::string> rv = client_->List(path_, [&](const rapidjson::Value& page) {
    auto items = page.FindMember("items");
    if (items == page.MemberEnd() || !items->value.IsArray()) return absl::OkStatus();
    for (rapidjson::SizeType i = 0; i < items->value.Size(); ++i) {
      const rapidjson::Value& item = items->value[i];
      absl::StatusOr<NodePod> pod = DecodeNodePod(item, absl::StrCat("items[", i, "]"));
      if (!pod.ok()) {
        ++rejected;
        LogEvent("pod_rejected", {{"pod", KeyOf(item)}, {"error", std::string(pod.status().message())}});
        continue;
      }
      if (pod->node != options_.node) continue;  // the selector already says so
      std::string key = pod->Key();
      fresh[key] = *std::move(pod);
    }
    return absl::OkStatus();
  });
  if (!rv.ok()) return rv.status();
  absl::MutexLock lock(&mu_);
  pods_ = std::move(fresh);
  ++counters_.lists;
  counters_.decode_errors += rejected;
  counters_.synced = true;
  list_done_for_ = std::max(list_done_for_, list_for);
  return rv;
}

bool ApiPodSource::HandleLine(absl::string_view line, std::string* resource_version,
                              bool* expired, bool* corrupt) {
  rapidjson::Document doc;
  doc.Parse(line.data(), line.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    *corrupt = true;  // re-watch from the last good resourceVersion, which replays it
    return false;
  }
  const std::string type = StringMember(doc, "type");
  auto obj = doc.FindMember("object");
  if (type.empty() || obj == doc.MemberEnd() || !obj->value.IsObject()) {
    *corrupt = true;
    return false;
  }
  if (type == "ERROR") {
    auto code = obj->value.FindMember("code");
    *expired = code != obj->value.MemberEnd() && code->value.IsInt() && code->value.GetInt() == 410;
    if (!*expired) *corrupt = true;
    return false;
  }
  const std::string rv = ResourceVersionOf(obj->value);
  if (type == "BOOKMARK") {
    if (!rv.empty()) *resource_version = rv;
    return true;
  }
  const std::string key = KeyOf(obj->value);
  if (key.empty()) {
    *corrupt = true;
    return false;
  }
  absl::StatusOr<NodePod> pod;
  if (type != "DELETED") pod = DecodeNodePod(obj->value, "object");
  if (pod.ok() && type != "DELETED" && !pod->node.empty() && pod->node != options_.node) {
    pod = absl::InvalidArgumentError("bound to another node");
  }
  {
    absl::MutexLock lock(&mu_);
    ++counters_.events_applied;
    if (type == "DELETED") {
      pods_.erase(key);
    } else if (pod.ok()) {
      pods_[key] = *std::move(pod);
    } else {
      pods_.erase(key);
      ++counters_.decode_errors;
    }
  }
  if (type != "DELETED" && !pod.ok()) {
    LogEvent("pod_rejected", {{"pod", key}, {"error", std::string(pod.status().message())}});
  }
  if (!rv.empty()) *resource_version = rv;
  return true;
}

absl::Status ApiPodSource::WatchFrom(std::string* resource_version, WatchStopper* stopper,
                                     bool* expired) {
  thread_local std::mt19937 rng(std::random_device{}());
  const double factor = std::uniform_real_distribution<double>(1.0, 2.0)(rng);
  const int64_t seconds =
      std::max<int64_t>(1, absl::ToInt64Seconds(options_.watch_timeout * factor));
  const std::string path =
      absl::StrCat(path_, "&watch=1&allowWatchBookmarks=true&resourceVersion=", *resource_version,
                   "&timeoutSeconds=", seconds);
  bool corrupt = false;
  absl::Status s = client_->Watch(
      path, absl::Seconds(seconds) + absl::Seconds(30),
      [&](absl::string_view line) { return HandleLine(line, resource_version, expired, &corrupt); },
      stopper);
  if (s.ok() && corrupt) return absl::DataLossError("corrupt watch event line");
  if (IsExpired(s)) *expired = true;
  return s;
}

void ApiPodSource::Run() {
  absl::Duration backoff = options_.backoff_initial;
  bool first_list = true;
  while (!Stopping()) {
    int64_t list_for;
    {
      absl::MutexLock lock(&mu_);
      list_for = resync_wanted_;
    }
    absl::StatusOr<std::string> rv = ListAndReplace(list_for);
    if (!rv.ok()) {
      {
        absl::MutexLock lock(&mu_);
        ++counters_.list_errors;
      }
      LogEvent("pod_list_failed", {{"node", options_.node}, {"error", std::string(rv.status().message())}});
      SleepUnlessStopping(backoff);
      backoff = std::min(backoff * 2, options_.backoff_max);
      continue;
    }
    if (first_list) LogEvent("pods_synced", {{"node", options_.node}});
    first_list = false;
    backoff = options_.backoff_initial;
    std::string resource_version = *rv;
    bool first_watch = true;
    while (true) {
      auto stopper = std::make_shared<WatchStopper>();
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        if (resync_wanted_ != list_for) break;  // a caller waits for a fresh list
        watch_stopper_ = stopper;
        if (!first_watch) ++counters_.watch_restarts;
      }
      first_watch = false;
      bool expired = false;
      absl::Status s = WatchFrom(&resource_version, stopper.get(), &expired);
      bool resync;
      {
        absl::MutexLock lock(&mu_);
        watch_stopper_.reset();
        if (stopping_) return;
        resync = resync_wanted_ != list_for;
        if (expired) ++counters_.expired;
        if (!s.ok() && !absl::IsCancelled(s) && !expired) ++counters_.watch_errors;
      }
      if (resync) break;
      if (expired) {
        LogEvent("pod_watch_expired", {{"node", options_.node}, {"resourceVersion", resource_version}});
        break;
      }
      if (s.ok()) {
        backoff = options_.backoff_initial;
        continue;  // the server ended the watch at timeoutSeconds
      }
      LogEvent("pod_watch_failed", {{"node", options_.node}, {"error", std::string(s.message())}});
      SleepUnlessStopping(backoff);
      backoff = std::min(backoff * 2, options_.backoff_max);
      {
        absl::MutexLock lock(&mu_);
        if (resync_wanted_ != list_for) break;
      }
    }
  }
}

}  // namespace gse::agent
