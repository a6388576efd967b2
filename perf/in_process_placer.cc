// InProcessPlacer: every verb a DecisionCore call (in_process_placer.h).
#include "perf/in_process_placer.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "scoring/feasibility.h"
#include "scoring/pod_request.h"

namespace gse::replay {

void ReleasePodNamed(ClusterState& state, const std::string& key) {
  // RemovePod, as the watch's deletion: the pod's units and its host view count go.
  if (const PodRecord* rec = state.FindPod(key)) {
    const std::string uid = rec->uid, pod_key = rec->key;
    state.RemovePod(uid, pod_key);
  }
}

InProcessPlacer::InProcessPlacer(std::shared_ptr<const Catalog> catalog,
                                 std::unique_ptr<PlacementPolicy> policy,
                                 DecisionCore::Options options)
    : policy_(std::move(policy)),
      mirror_(std::move(catalog), MirrorOptions{}),
      core_(&mirror_, policy_.get(), options) {}

absl::Status InProcessPlacer::Start(const std::string& list_json, const ObjectBatch& batch) {
  return ApplyObjects(list_json, batch);
}

absl::Status InProcessPlacer::ApplyObjects(const std::string&, const ObjectBatch& batch) {
  mirror_.Write([&](ClusterState& s) {
    s.ApplyBatch(batch);
    return true;
  });
  return absl::OkStatus();
}

absl::Status InProcessPlacer::ApplyNode(const std::string&, const NodeObject& node) {
  mirror_.Write([&](ClusterState& s) { return s.ApplyNode(node); });
  return absl::OkStatus();
}

absl::Status InProcessPlacer::RemoveNode(const std::string& name) {
  mirror_.Write([&](ClusterState& s) {
    s.RemoveNode(name);
    return true;
  });
  return absl::OkStatus();
}

absl::Status InProcessPlacer::DeletePod(const std::string& ns, const std::string& name) {
  const std::string key = absl::StrCat(ns, "/", name);
  std::string plain_uid;
  {
    absl::MutexLock lock(&plain_mu_);
    if (auto it = plain_uids_.find(key); it != plain_uids_.end()) {
      plain_uid = it->second;
      plain_uids_.erase(it);
    }
  }
  mirror_.Write([&](ClusterState& s) {
    if (!plain_uid.empty()) {
      s.RemovePod(plain_uid, key);  // the watch's deletion: its host view count goes
    } else {
      ReleasePodNamed(s, key);
    }
    return true;
  });
  return absl::OkStatus();
}

absl::Status InProcessPlacer::BindPlain(const PodPlan& plan, const std::string& node) {
  PodObject bound = plan.pod;
  bound.node_name = node;
  bound.phase = "Running";
  {
    absl::MutexLock lock(&plain_mu_);
    plain_uids_[bound.Key()] = bound.uid;
  }
  mirror_.Write([&](ClusterState& s) {
    s.ApplyPod(bound);
    return true;
  });
  return absl::OkStatus();
}

absl::Status InProcessPlacer::ApplyBoundPod(const PodObject& pod, const std::string&) {
  mirror_.Write([&](ClusterState& s) {
    s.ApplyPod(pod);
    return true;
  });
  return absl::OkStatus();
}

namespace {

std::vector<absl::string_view> Views(const std::vector<std::string>& names) {
  return std::vector<absl::string_view>(names.begin(), names.end());
}

}  // namespace

absl::StatusOr<FilterAnswer> InProcessPlacer::Filter(const PodPlan& plan,
                                                     const std::vector<std::string>& candidates) {
  const FilterDecision d = core_.Filter(plan.pod, Views(candidates));
  FilterAnswer answer;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (d.verdicts[i] == FitReason::kFits) {
      answer.passed.push_back(candidates[i]);
    } else {
      answer.failed[candidates[i]] = std::string(FitReasonLabel(d.verdicts[i]));
    }
  }
  return answer;
}

absl::StatusOr<std::vector<int64_t>> InProcessPlacer::Prioritize(
    const PodPlan& plan, const std::vector<std::string>& names) {
  // Pods outside the catalog reach prioritize only with ReplayOptions::extender_all_pods,
  // and the placer was then built with DecisionCore::Options::every_pod: the policy scores
  // them (ScoresEveryPod).
  return core_.Prioritize(plan.pod, Views(names));
}

absl::StatusOr<Assignment> InProcessPlacer::Bind(const PodPlan& plan, const std::string& node_name) {
  return BindWithOutcome(plan, node_name).assignment;
}

ReserveDecision InProcessPlacer::BindWithOutcome(const PodPlan& plan, const std::string& node_name) {
  const PodRequest request = core_.Resolve(plan.pod).request;
  ReserveDecision d;
  d.refusal = ReserveRefusal::kNoFit;
  if (!request.interested()) {
    d.assignment = absl::FailedPreconditionError("pod requests no GPU offering");
    return d;
  }
  if (!request.unresolvable.empty()) {
    d.assignment = absl::FailedPreconditionError(request.unresolvable);
    return d;
  }
  const PodClaim claim{plan.pod.Key(), plan.pod.uid, plan.pod.namespace_name, request.project};
  d = core_.Reserve(claim, request, node_name);
  // No API server: the bind is done once reserved.
  if (d.assignment.ok()) (void)mirror_.Confirm(PodIdOf(claim.uid, claim.key));
  return d;
}

std::optional<AuditReport> InProcessPlacer::MirrorAudit() {
  return mirror_.Read([](const ClusterState& s) { return s.Audit(); });
}
}  // namespace gse::replay
