// PodRequeuer: see pod_requeue.h.
#include "kube/pod_requeue.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/json_reader.h"

namespace gse {
namespace {

// Pending pods: not bound yet. kube-apiserver serves this field selector from its watch
// cache, so the list carries only the pods that may be parked, not the whole cluster.
constexpr char kPendingPodsPath[] = "/api/v1/pods?fieldSelector=spec.nodeName%3D";

std::string PodPath(const PodObject& pod) {
  return absl::StrCat("/api/v1/namespaces/", pod.namespace_name, "/pods/", pod.name);
}

// {"metadata":{"resourceVersion":RV,"annotations":{kRequeueAnnotation:VALUE}}}
std::string PatchBody(const std::string& resource_version, const std::string& value) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("metadata");
  w.StartObject();
  w.Key("resourceVersion");
  w.String(resource_version.c_str());
  w.Key("annotations");
  w.StartObject();
  w.Key(kRequeueAnnotation);
  w.String(value.c_str());
  w.EndObject();
  w.EndObject();
  w.EndObject();
  return buf.GetString();
}

// A pod that kube-scheduler may still have parked and that is ours to nudge.
bool Pending(const PodObject& pod) {
  return pod.node_name.empty() && !pod.terminating && !pod.Terminal();
}

bool CarriesValue(const PodObject& pod, const std::string& value) {
  auto it = pod.annotations.find(kRequeueAnnotation);
  return it != pod.annotations.end() && it->second == value;
}

}  // namespace

PodRequeuer::PodRequeuer(KubeClient* client, PodRequeueOptions options)
    : client_(client), options_(std::move(options)) {}

PodRequeuer::~PodRequeuer() { Stop(); }

void PodRequeuer::Start() {
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
}

void PodRequeuer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    ++generation_;
  }
  if (thread_.joinable()) thread_.join();
}

void PodRequeuer::Trigger(const std::string& term) {
  absl::MutexLock lock(&mu_);
  ++generation_;
  term_ = term;
  next_pass_ = options_.passes > 0 ? 1 : 0;
  next_pass_at_ = absl::Now();
}

void PodRequeuer::Cancel() {
  absl::MutexLock lock(&mu_);
  ++generation_;
  next_pass_ = 0;
  next_pass_at_ = absl::InfiniteFuture();
}

PodRequeueCounters PodRequeuer::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

bool PodRequeuer::WaitForPasses(int64_t n, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (counters_.passes + counters_.passes_failed + counters_.passes_cancelled >= n) return true;
    }
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

bool PodRequeuer::Cancelled(uint64_t generation) const {
  absl::MutexLock lock(&mu_);
  return stopping_ || generation != generation_;
}

void PodRequeuer::Log(const std::string& event, const std::string& detail) const {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  const std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  w.Key("ts");
  w.String(ts.c_str());
  w.Key("component");
  w.String("takeover_requeue");
  w.Key("event");
  w.String(event.c_str());
  if (!detail.empty()) {
    w.Key("detail");
    w.String(detail.c_str());
  }
  w.EndObject();
  if (options_.log) {
    options_.log(buf.GetString());
  } else {
    std::fprintf(stderr, "%s\n", buf.GetString());
  }
}

void PodRequeuer::Run() {
  while (true) {
    std::string value;
    uint64_t generation = 0;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (next_pass_ > 0 && absl::Now() >= next_pass_at_) {
        value = absl::StrCat(term_, "/", next_pass_);
        generation = generation_;
        if (next_pass_ < options_.passes) {
          ++next_pass_;
          next_pass_at_ = absl::Now() + options_.settle;
        } else {
          next_pass_ = 0;
          next_pass_at_ = absl::InfiniteFuture();
        }
      }
    }
    if (value.empty()) {
      // Polled in short steps: timed absl waits are invisible to TSan with Debian's Abseil.
      absl::SleepFor(absl::Milliseconds(5));
      continue;
    }
    const PassEnd end = RunPass(value, generation);
    absl::MutexLock lock(&mu_);
    switch (end) {
      case PassEnd::kCompleted: ++counters_.passes; break;
      case PassEnd::kListFailed: ++counters_.passes_failed; break;
      case PassEnd::kCancelled: ++counters_.passes_cancelled; break;
    }
  }
}

PodRequeuer::PassEnd PodRequeuer::RunPass(const std::string& value, uint64_t generation) {
  std::vector<PodObject> pending;
  absl::StatusOr<std::string> listed =
      client_->List(kPendingPodsPath, [&](const rapidjson::Value& page) {
        const rapidjson::Value& items = page["items"];
        if (!items.IsArray()) return absl::DataLossError("pending pods: items is not an array");
        for (rapidjson::SizeType i = 0; i < items.Size(); ++i) {
          // A pod the decoder rejects is left alone (the reflector logs and counts it).
          absl::StatusOr<PodObject> pod = DecodePod(items[i], absl::StrCat("items[", i, "]"));
          if (pod.ok() && Pending(*pod)) pending.push_back(*std::move(pod));
        }
        return absl::OkStatus();
      });
  if (!listed.ok()) {
    Log("list_failed", std::string(listed.status().message()));
    return PassEnd::kListFailed;
  }
  const absl::Duration spacing =
      options_.qps > 0 ? absl::Seconds(1.0 / options_.qps) : absl::ZeroDuration();
  absl::Time next_patch = absl::Now();
  int touched = 0, skipped = 0;
  for (const PodObject& pod : pending) {
    if (Cancelled(generation)) return PassEnd::kCancelled;
    if (!options_.wants(pod)) {
      ++skipped;
      continue;
    }
    if (CarriesValue(pod, value)) {
      absl::MutexLock lock(&mu_);
      ++counters_.already;
      continue;
    }
    // Paced in short sleeps so that Cancel and Stop are prompt.
    while (absl::Now() < next_patch) {
      if (Cancelled(generation)) return PassEnd::kCancelled;
      absl::SleepFor(std::min(absl::Milliseconds(5), next_patch - absl::Now()));
    }
    next_patch = absl::Now() + spacing;
    const Touch t = TouchPod(pod, value);
    absl::MutexLock lock(&mu_);
    switch (t) {
      case Touch::kTouched: ++counters_.touched; ++touched; break;
      case Touch::kAlready: ++counters_.already; break;
      case Touch::kChanged: ++counters_.changed; break;
      case Touch::kFailed: ++counters_.failed; break;
      case Touch::kSkipped: ++skipped; break;
    }
  }
  Log("pass", absl::StrCat(value, ": ", pending.size(), " pending, ", touched, " touched, ",
                           skipped, " not ours"));
  return PassEnd::kCompleted;
}

PodRequeuer::Touch PodRequeuer::TouchPod(const PodObject& listed, const std::string& value) {
  const PodObject* pod = &listed;
  PodObject reread;
  // The listed version first; after a 409 the current one, once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<std::string> patched = client_->MergePatchWithTimeout(
        PodPath(*pod), PatchBody(pod->resource_version, value), options_.call_timeout);
    if (patched.ok()) return Touch::kTouched;
    const int code = KubeErrorOf(patched.status()).http_code;
    if (code == 404) return Touch::kChanged;
    if (code != 409 || attempt > 0) {
      if (code == 409) return Touch::kChanged;
      Log("patch_failed", std::string(patched.status().message()));
      return Touch::kFailed;
    }
    // Changed since the list: touch it only if it is still the same pending pod we want.
    absl::StatusOr<std::string> got = client_->GetWithTimeout(PodPath(*pod), options_.call_timeout);
    if (!got.ok()) {
      return KubeErrorOf(got.status()).http_code == 404 ? Touch::kChanged : Touch::kFailed;
    }
    rapidjson::Document doc;
    if (!ParseJsonLimited(*got, doc).ok()) return Touch::kFailed;
    absl::StatusOr<PodObject> current = DecodePod(doc, "pod");
    if (!current.ok() || current->uid != listed.uid || !Pending(*current)) return Touch::kChanged;
    if (CarriesValue(*current, value)) return Touch::kAlready;
    if (!options_.wants(*current)) return Touch::kSkipped;
    reread = *std::move(current);
    pod = &reread;
  }
  return Touch::kChanged;
}

}  // namespace gse
