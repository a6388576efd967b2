// AuditLoop: pod-resources audit, confirmations, Node inventory; see audit_loop.h.
#include "agent/audit_loop.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/agent_log.h"
#include "agent/published_inventory.h"

namespace gse::agent {
namespace {

const NodePod* FindPod(const std::vector<NodePod>& pods, const std::string& key) {
  for (const NodePod& p : pods) {
    if (p.Key() == key) return &p;
  }
  return nullptr;
}

PodRef RefOf(const std::string& key, const NodePod* pod) {
  const size_t slash = key.find('/');
  PodRef ref{key.substr(0, slash), slash == std::string::npos ? "" : key.substr(slash + 1), ""};
  if (pod != nullptr) ref.uid = pod->uid;
  return ref;
}

}  // namespace

AuditLoop::AuditLoop(const UnitMap* units, const Catalog* catalog, PodSource* pods,
                     PodResourcesSource* pod_resources, AdmissionGuard* guard,
                     const DeviceHealth* health, AgentMetrics* metrics, ApiWriter* writer,
                     AuditLoopOptions options)
    : units_(units),
      catalog_(catalog),
      pods_(pods),
      pod_resources_(pod_resources),
      guard_(guard),
      health_(health),
      metrics_(metrics),
      writer_(writer),
      options_(std::move(options)) {}

AuditLoop::~AuditLoop() { Stop(); }

void AuditLoop::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void AuditLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void AuditLoop::Kick() {
  absl::MutexLock lock(&mu_);
  kicked_ = true;
}

int64_t AuditLoop::rounds() const {
  absl::MutexLock lock(&mu_);
  return rounds_;
}

// Waits poll with plain locking: Debian's Abseil is not built with TSan and timed waits are
// not annotated (cmake/tsan_absl_sync.cc).
void AuditLoop::Loop() {
  int retries_left = 0;
  absl::Time next = absl::Now();  // the first round at once: publish the inventory
  while (true) {
    bool kicked = false;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      kicked = kicked_;
      kicked_ = false;
    }
    if (kicked) {
      retries_left = options_.kick_retries;
      next = std::min(next, absl::Now());
    }
    if (absl::Now() < next) {
      absl::SleepFor(absl::Milliseconds(5));  // a kick waits at most this long
      continue;
    }
    RunOnce();
    // After an Allocate kubelet records the IDs only once our answer reached it: look again
    // shortly while the guard still holds bookings that pod-resources does not show yet.
    if (retries_left > 0 && guard_->bookings() > 0) {
      --retries_left;
      next = absl::Now() + options_.kick_retry;
    } else {
      retries_left = 0;
      next = absl::Now() + options_.interval;
    }
  }
}

AuditRound AuditLoop::RunOnce() {
  AuditRound round;
  auto view = pod_resources_->List(options_.pod_resources_timeout);
  const std::vector<NodePod> pods = pods_->Snapshot();
  if (!view.ok()) {
    if (metrics_ != nullptr) metrics_->OnApiError("pod_resources");
    LogEvent("pod_resources_failed", {{"error", std::string(view.status().message())}});
  } else {
    round.pod_resources_ok = true;
    round.report = AuditNode(options_.node, *units_, *catalog_, pods, *view);
    guard_->UpdatePodResources(*std::move(view));
    ReportFindings(pods, &round);
    WriteConfirmations(pods, &round);
  }
  PublishInventory(&round);
  if (metrics_ != nullptr) {
    for (const ServedOffering& o : units_->offerings()) {
      int unhealthy = 0;
      for (const UnitDevice& u : o.units()) unhealthy += health_->UnitHealthy(u) ? 0 : 1;
      metrics_->SetUnhealthyUnits(o.resource(), unhealthy);
    }
  }
  absl::MutexLock lock(&mu_);
  ++rounds_;
  return round;
}

void AuditLoop::ReportFindings(const std::vector<NodePod>& pods, AuditRound* round) {
  std::vector<const AuditFinding*> fresh;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = reported_.begin(); it != reported_.end();) {
      it = FindPod(pods, it->first) == nullptr ? reported_.erase(it) : std::next(it);
    }
    for (const AuditFinding& f : round->report.findings) {
      if (reported_[f.pod_key].insert(absl::StrCat(f.resource, "\n", f.message)).second) {
        fresh.push_back(&f);
      }
    }
  }
  for (const AuditFinding* f : fresh) {
    ++round->new_findings;
    LogEvent("audit_mismatch", {{"node", options_.node},
                                {"pod", f->pod_key},
                                {"resource", f->resource},
                                {"message", f->message}});
    if (metrics_ != nullptr) metrics_->OnAuditMismatch(f->resource);
    if (writer_ == nullptr) continue;
    const PodRef ref = RefOf(f->pod_key, FindPod(pods, f->pod_key));
    absl::Status s = writer_->PostPodEvent(
        ref, kMismatchReason,
        absl::StrCat("gpu-slice-agent audit on node ", options_.node, ": ", f->resource, ": ",
                     f->message));
    if (!s.ok()) {
      ++round->write_errors;
      if (metrics_ != nullptr) metrics_->OnApiError("event");
      LogEvent("event_failed", {{"pod", f->pod_key}, {"error", std::string(s.message())}});
    }
  }
}

void AuditLoop::WriteConfirmations(const std::vector<NodePod>& pods, AuditRound* round) {
  std::vector<Confirmation> todo;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = confirmed_.begin(); it != confirmed_.end();) {
      it = FindPod(pods, it->first) == nullptr ? confirmed_.erase(it) : std::next(it);
    }
    for (const Confirmation& c : round->report.confirmations) {
      auto it = confirmed_.find(c.pod_key);
      if (it == confirmed_.end() || it->second != c.ids) todo.push_back(c);
    }
  }
  for (const Confirmation& c : todo) {
    if (writer_ == nullptr) continue;
    const NodePod* pod = FindPod(pods, c.pod_key);
    absl::Status s = writer_->ConfirmAllocation(RefOf(c.pod_key, pod), c.ids);
    if (!s.ok()) {
      ++round->write_errors;
      if (metrics_ != nullptr) metrics_->OnApiError("patch_pod");
      LogEvent("confirm_failed", {{"pod", c.pod_key}, {"error", std::string(s.message())}});
      continue;
    }
    ++round->confirmed;
    if (metrics_ != nullptr) metrics_->OnConfirmation();
    LogEvent("allocation_confirmed", {{"pod", c.pod_key}, {"resource", c.resource}, {"ids", c.ids}});
    absl::MutexLock lock(&mu_);
    confirmed_[c.pod_key] = c.ids;
  }
}

void AuditLoop::PublishInventory(AuditRound* round) {
  if (writer_ == nullptr) return;
  const std::string value = PublishedInventoryJson(*units_, *health_);
  {
    absl::MutexLock lock(&mu_);
    if (value == published_inventory_) return;
  }
  absl::Status s = writer_->PublishInventory(value);
  if (!s.ok()) {
    ++round->write_errors;
    if (metrics_ != nullptr) metrics_->OnApiError("patch_node");
    LogEvent("inventory_publish_failed", {{"node", options_.node}, {"error", std::string(s.message())}});
    return;
  }
  round->inventory_published = true;
  LogEvent("inventory_published", {{"node", options_.node}});
  absl::MutexLock lock(&mu_);
  published_inventory_ = value;
}

}  // namespace gse::agent
