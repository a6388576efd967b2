// DecisionCore: filter, prioritize, reserve and preempt over the Mirror (decision_core.h).
#include "scoring/decision_core.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gse {

std::string OfferingLabel(const ClusterState& state, const PodRequest& request) {
  if (request.offering == kNoOffering) return "none";
  return state.catalog().Get(request.offering).resource;
}

namespace {

PodRequest ResolveOn(const ClusterState& state, const PodObject& pod) {
  return ResolvePodRequest(state.catalog(), pod, state.ProjectOfNamespace(pod.namespace_name));
}

// What bind's metrics call a CheckNode refusal at the commit point.
ReserveRefusal RefusalOf(FitReason reason) {
  switch (reason) {
    case FitReason::kNoFreeUnit:
    case FitReason::kNoFreeTicket:
    case FitReason::kNoUnitWithShares:
      return ReserveRefusal::kUnitTaken;
    case FitReason::kQuotaExhausted:
      return ReserveRefusal::kQuota;
    default:
      return ReserveRefusal::kNoFit;
  }
}

// Whether `a`'s first unit already held tickets of `request`'s project before this bind.
bool JoinsOwnUnit(const ClusterState& state, const PodRequest& request, const NodeState& node,
                  const Assignment& a) {
  if (a.units.empty()) return false;
  const NodeOffering* no = node.Find(request.offering);
  const ProjectId project = state.FindProject(request.project);
  const auto idx = static_cast<size_t>(a.units.front());
  return no != nullptr && project != kNoProject && idx < no->units.size() &&
         no->units[idx].owner == project && no->units[idx].used > 0;
}

}  // namespace

DecisionCore::DecisionCore(Mirror* mirror, const PlacementPolicy* policy, Options options)
    : mirror_(mirror), policy_(policy), options_(options) {}

namespace {

// The best-scored candidate the policy scored (`scored`; ties to the lowest name) scores 10
// and the others half their score (DecisionCore::Prioritize). A node the policy scored 0 can
// win: among nodes that all score 0 the policy still prefers the first, as First Fit does.
void NameWinner(const std::vector<absl::string_view>& names, const std::vector<bool>& scored,
                std::vector<int64_t>& scores) {
  std::optional<size_t> best;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (!scored[i]) continue;
    if (!best || scores[i] > scores[*best] ||
        (scores[i] == scores[*best] && names[i] < names[*best])) {
      best = i;
    }
  }
  if (!best) return;
  for (int64_t& s : scores) s /= 2;
  scores[*best] = kMaxExtenderPriority;
}

}  // namespace

DecisionCore::Resolved DecisionCore::Resolve(const PodObject& pod) const {
  return mirror_->Read([&](const ClusterState& state) {
    Resolved r;
    r.request = ResolveOn(state, pod);
    r.offering_label = OfferingLabel(state, r.request);
    r.time_sliced = r.request.offering != kNoOffering &&
                    state.catalog().Get(r.request.offering).sharing == Sharing::kTimeSliced;
    return r;
  });
}

std::shared_ptr<const CandidateNodes> DecisionCore::LookUp(
    const ClusterState& state, const std::vector<absl::string_view>& names) {
  {
    absl::MutexLock lock(&lookup_mu_);
    bool same =
        lookup_version_ == state.node_set_version() && lookup_lengths_.size() == names.size();
    size_t at = 0;
    for (size_t i = 0; same && i < names.size(); ++i) {
      same = names[i].size() == lookup_lengths_[i] &&
             std::memcmp(names[i].data(), lookup_names_.data() + at, names[i].size()) == 0;
      at += lookup_lengths_[i];
    }
    // Node pointers and slots stay valid while the node set version is unchanged
    // (cluster_state.h); the shared copy outlives a later lookup that replaces it.
    if (same) return lookup_found_;
  }
  auto found = std::make_shared<CandidateNodes>();
  found->nodes = state.FindNodes(names);
  found->slots = SlotsOf(found->nodes);
  absl::MutexLock lock(&lookup_mu_);
  lookup_names_.clear();
  lookup_lengths_.clear();
  for (absl::string_view name : names) {
    lookup_names_.append(name.data(), name.size());
    lookup_lengths_.push_back(static_cast<uint32_t>(name.size()));
  }
  lookup_found_ = found;
  lookup_version_ = state.node_set_version();
  return found;
}

namespace {

void AddDriftNotes(const ClusterState& state, std::vector<std::string>* notes) {
  for (const std::string& line : state.DraDrift()) notes->push_back(absl::StrCat("catalog drift: ", line));
}

// FilterDecision::dra_notes.
std::vector<std::string> DraFilterNotes(const ClusterState& state, const PodRequest& request,
                                        const std::vector<const NodeState*>& nodes,
                                        const FilterOutcome& outcome) {
  std::vector<std::string> notes;
  size_t unpredicted = 0;
  for (const auto& [i, why] : outcome.dra_unpredicted) {
    if (!outcome.fits[i].fits()) continue;  // the affinity rule refused it after all
    if (++unpredicted <= DecisionCore::kMaxUnpredictedNotes) {
      notes.push_back(absl::StrCat(nodes[i]->name, ": no prediction: ", why));
    }
  }
  if (unpredicted > DecisionCore::kMaxUnpredictedNotes) {
    notes.push_back(absl::StrCat("and ", unpredicted - DecisionCore::kMaxUnpredictedNotes,
                                 " more node(s) passed with no prediction"));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!outcome.fits[i].fits() || nodes[i] == nullptr) continue;
    const NodeOffering* no = nodes[i]->Find(request.offering);
    if (no != nullptr && no->dra) {
      AddDriftNotes(state, &notes);
      break;
    }
  }
  return notes;
}

}  // namespace

std::vector<std::string> DecisionCore::DraBindNotes(const PodRequest& request,
                                                    absl::string_view node_name) const {
  std::vector<std::string> notes;
  mirror_->Read([&](const ClusterState& state) {
    if (!state.options().dra || !request.interested()) return;
    const NodeState* node = state.FindNode(node_name);
    const NodeOffering* no = node != nullptr ? node->Find(request.offering) : nullptr;
    if (no != nullptr && no->dra) AddDriftNotes(state, &notes);
  });
  return notes;
}

FilterDecision DecisionCore::Filter(const PodObject& pod,
                                    const std::vector<absl::string_view>& names, bool dra_notes) {
  FilterDecision d;
  d.verdicts.assign(names.size(), FitReason::kFits);
  ClusterOutlook outlook;
  mirror_->Read([&](const ClusterState& state) {
    d.request = ResolveOn(state, pod);
    d.offering_label = OfferingLabel(state, d.request);
    // I6: a pod asking for no catalog resource passes every node, known or not.
    if (!d.request.interested()) return;
    // The pods without a GPU that kube-scheduler places by its own scores land anywhere, so
    // a policy should keep room for them beside idle GPUs. When every pod comes here they are
    // the policy's own placements (it puts them where they strand no GPU): none to expect.
    // Then, too, it keeps cpu beside every pool's idle capacity in full: packing those pods
    // itself, it would otherwise fill the cpu beside every pool the mix asks little of, and
    // leave its few tasks nowhere to go (docs/fgd.md, "Pools the mix asks little of").
    if (!options_.every_pod) {
      outlook.recent_host_demand = state.recent_host_demand();
      outlook.open_units = state.open_units();
    }
    const std::shared_ptr<const CandidateNodes> candidates = LookUp(state, names);
    FilterOutcome outcome =
        FilterNodes(state, d.request, candidates->nodes, candidates->slots, [](size_t) {});
    d.spill_outside_candidates = outcome.spill_outside_candidates;
    for (size_t i = 0; i < d.verdicts.size(); ++i) d.verdicts[i] = outcome.fits[i].reason;
    if (dra_notes && state.options().dra) {
      d.dra_notes = DraFilterNotes(state, d.request, candidates->nodes, outcome);
    }
  });
  // Filter sees every pod kube-scheduler considers, fitting or not: what a learning policy
  // learns the expected mix of tasks from.
  if (d.request.interested() && d.request.unresolvable.empty()) policy_->ObservePending(pod, d.request, outlook);
  return d;
}

std::vector<int64_t> DecisionCore::Prioritize(const PodObject& pod,
                                              const std::vector<absl::string_view>& names) {
  std::vector<int64_t> scores(names.size(), 0);
  std::vector<bool> scored(names.size(), false);  // the policy scored it (filter passed)
  const std::shared_ptr<const PlacementPolicy> snapshot = policy_->Snapshot();
  const PlacementPolicy* const policy = snapshot != nullptr ? snapshot.get() : policy_;
  // kube-scheduler does not clamp (PROTOCOL §2.5): a policy bug must not dominate.
  auto clamped = [](int64_t s) { return std::clamp<int64_t>(s, 0, kMaxExtenderPriority); };
  mirror_->Read([&](const ClusterState& state) {
    const PodRequest request = ResolveOn(state, pod);
    if (!request.unresolvable.empty()) return;
    if (request.offering == kNoOffering) {
      if (!options_.every_pod) return;
      const std::shared_ptr<const CandidateNodes> candidates = LookUp(state, names);
      for (size_t i = 0; i < names.size(); ++i) {
        if (candidates->nodes[i] == nullptr) continue;
        scores[i] = clamped(policy->Score(state, request, *candidates->nodes[i]));
        scored[i] = true;
      }
      return;
    }
    const std::shared_ptr<const CandidateNodes> candidates = LookUp(state, names);
    const std::vector<const NodeState*>& nodes = candidates->nodes;
    const ProjectId project = state.FindProject(request.project);
    const RoomRow* rows = state.RoomRows(request.offering);
    const FilterOutcome outcome =
        FilterNodes(state, request, nodes, candidates->slots, [&](size_t i) {
          std::optional<int64_t> score =
              policy->ScoreFilteredRow(state, request, project, rows[candidates->slots[i]]);
          if (!score) score = policy->ScoreFiltered(state, request, project, *nodes[i]);
          scores[i] = clamped(*score);
          scored[i] = true;
        });
    // Nodes the cross-node affinity rule refused after all score 0.
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!outcome.fits[i].fits()) {
        scores[i] = 0;
        scored[i] = false;
      }
    }
  });
  if (options_.every_pod && policy->DecidesOutrightSeeingEveryPod()) NameWinner(names, scored, scores);
  return scores;
}

namespace {

// The project a DRA holder's claim counts for: its pod's record, else its namespace's project.
std::string HolderProject(const ClusterState& state, const DraHolder& h) {
  if (const PodRecord* rec = state.FindPodByUid(h.pod_uid);
      rec != nullptr && rec->project != kNoProject) {
    return state.project(rec->project).name;
  }
  return state.ProjectOfNamespace(h.claim_key.substr(0, h.claim_key.find('/')));
}

// Waits (outside the lock, polling the reader lock) until the mirror has the pod's allocated
// extended-resource claim on the node, for at most `wait`; at once unless the node offering
// is DRA-backed. False when the wait ended without the claim.
bool WaitForDraClaim(Mirror& mirror, const PodClaim& claim, const PodRequest& request,
                     const std::string& node_name, absl::Duration wait,
                     const std::string& claim_key) {
  const absl::Time deadline = absl::Now() + wait;
  while (true) {
    const bool done = mirror.Read([&](const ClusterState& state) {
      if (!state.options().dra) return true;
      const NodeState* node = state.FindNode(node_name);
      const NodeOffering* no = node != nullptr ? node->Find(request.offering) : nullptr;
      return no == nullptr || !no->dra ||
             !state.DraExtendedClaimOf(node_name, claim.uid, claim_key).empty();
    });
    if (done) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// Why the mirror's copy of `key`, which did not show it usable, wins over `read` ("" when it
// does not): it is at least as new, or the two cannot be ordered (the mirror is the ordered
// stream). No copy: the read wins.
std::string MirrorCopyWins(const ClusterState& state, const std::string& key,
                           const DraResourceClaim& read) {
  const DraResourceClaim* mirrored = state.dra().ResourceClaim(key);
  if (mirrored == nullptr) return "";
  const std::optional<int> order =
      CompareResourceVersions(mirrored->resource_version, read.resource_version);
  if (order.has_value() && *order < 0) return "";
  const std::string versions = absl::StrCat(" (resourceVersion ", mirrored->resource_version,
                                            " against the API's ", read.resource_version, ")");
  if (!order.has_value()) {
    return absl::StrCat("the mirror's copy of ", key, " and the API's answer cannot be ordered",
                        versions);
  }
  return absl::StrCat("the mirror's copy of ", key, " is as new as the API's answer or newer",
                      versions);
}

// Why `read`, the claim bind read from the API as `key`, is not the pod's allocated
// extended-resource claim on `node` ("" when it is).
std::string ReadClaimProblem(const ClusterState& state, const PodClaim& claim,
                             const std::string& key, const std::string& node,
                             const DraResourceClaim& read) {
  if (read.Key() != key) return absl::StrCat("the API answered ", read.Key(), " for ", key);
  if (!read.IsExtendedResourceClaim() || read.owner_pod_uid != claim.uid) {
    return absl::StrCat(key, " is not pod ", claim.key, "'s extended-resource claim");
  }
  if (read.terminating) return absl::StrCat(key, " is being deleted");
  if (std::string wins = MirrorCopyWins(state, key, read); !wins.empty()) return wins;
  if (absl::Status s = state.dra().VerifyClaim(read, node); !s.ok()) {
    return std::string(s.message());
  }
  return "";
}

}  // namespace

absl::StatusOr<Assignment> DraAllocatedUnits(const ClusterState& state, const PodClaim& claim,
                                             const PodRequest& request, const NodeState& node,
                                             const NodeOffering& no,
                                             const std::string& claim_key,
                                             const absl::StatusOr<DraResourceClaim>* read) {
  const Offering& offering = state.catalog().Get(request.offering);
  std::string key = state.DraExtendedClaimOf(node.name, claim.uid, claim_key);
  std::vector<int32_t> units;
  if (!key.empty()) {
    if (absl::Status s = state.dra().VerifyAllocation(key, node.name); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("DRA claim ", key, ": ", s.message()));
    }
    units = state.DraUnitsOfClaim(no, node.name, key);
  } else {
    const std::string missing = absl::StrCat(
        "DRA node ", node.name, ": no allocated extended-resource claim of pod ", claim.key,
        claim_key.empty() ? "" : absl::StrCat(" (", claim_key, ")"), " in the mirror");
    if (read == nullptr || claim_key.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(missing, " (kube-scheduler writes it before bind); not bound, retry"));
    }
    if (!read->ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          missing, ", and reading it from the API failed: ", read->status().message(),
          "; not bound, retry"));
    }
    if (std::string problem = ReadClaimProblem(state, claim, claim_key, node.name, **read);
        !problem.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(missing, "; as read from the API: ", problem, "; not bound, retry"));
    }
    key = claim_key;
    // VerifyClaim checked that every result names a device of its class on this node.
    units = ClusterState::DraUnitsOfResults(no, (*read)->results);
  }
  // An extended-resource claim asks `amount` devices (ExactCount); a shared offering's pod
  // takes one share of one device.
  const size_t want = offering.shared() ? 1 : static_cast<size_t>(request.amount);
  if (units.size() != want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DRA claim ", key, " holds ", units.size(), " device(s) of ", offering.resource, " on ",
        node.name, "; the pod asks ", want));
  }
  for (const DraHolder& h : state.dra().HoldersOn(node.name)) {
    if (h.claim_key == key) continue;
    const std::string device = h.device.ToString();
    const bool ours = std::any_of(units.begin(), units.end(), [&](int32_t i) {
      return no.unit_devices[static_cast<size_t>(i)] == device;
    });
    if (!ours) continue;
    if (!h.extended) {
      return absl::FailedPreconditionError(absl::StrCat(
          "DRA device ", device, " is also held by the user-made claim ", h.claim_key));
    }
    if (!offering.shared()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "DRA device ", device, " of exclusive ", offering.resource,
          " is also held by claim ", h.claim_key));
    }
    const std::string other = HolderProject(state, h);
    if (other != claim.project) {
      return absl::FailedPreconditionError(absl::StrCat(
          "restricted sharing: DRA device ", device, " holds claim ", h.claim_key,
          " of project ", other, "; project ", claim.project, " may not share it"));
    }
  }
  Assignment a;
  a.node = node.name;
  a.offering = request.offering;
  a.units = std::move(units);
  a.amount_per_unit = 1;
  return a;
}

ReserveDecision DecisionCore::Reserve(const PodClaim& claim, const PodRequest& request,
                                      const std::string& node_name,
                                      const DraBindClaim& dra) {
  ReserveDecision d;
  // Our bind counts against the node's cpu/memory from the commit point, before the watch
  // shows it (ClusterState "the host view"), as kube-scheduler's assume cache counts it.
  const std::optional<HostRequest> host =
      request.host_known ? std::optional<HostRequest>(request.host) : std::nullopt;
  const std::shared_ptr<const PlacementPolicy> snapshot = policy_->Snapshot();
  const PlacementPolicy* const policy = snapshot != nullptr ? snapshot.get() : policy_;
  const std::string pod_id = PodIdOf(claim.uid, claim.key);
  // The claim watch may trail PreBind: wait for it, then read the claim (outside the lock).
  std::optional<absl::StatusOr<DraResourceClaim>> read;
  if (!WaitForDraClaim(*mirror_, claim, request, node_name, dra.wait, dra.key) && dra.read &&
      !dra.key.empty()) {
    read.emplace(dra.read());
  }
  // Filled in by the chooser, which runs under the mirror's writer lock. If Reserve's own
  // re-check refuses what the chooser returned, the unit was taken under our feet.
  ReserveRefusal refusal = ReserveRefusal::kUnitTaken;
  // A pod that already holds units (a concurrent bind of the same pod, an earlier bind whose
  // outcome was unknown, or a watch event that recorded the pod as bound) keeps them whatever
  // this call's Binder says; a reservation still in flight is joined, and counted as one more
  // bind of it (ClusterState::Reserve), so that no call's "not bound" frees what another
  // call's POST may still commit (ClusterState::ReleaseReservation).
  // The claim verified on a DRA node is the pod's (PodRecord::dra_claim): a failed attempt's
  // claim that a lagging watch delivers later must not move the holding.
  PodClaim holder = claim;
  holder.dra_claim = dra.key;
  d.assignment = mirror_->ReserveWith(
      holder, [&](const ClusterState& state) -> absl::StatusOr<Assignment> {
        d.time_sliced = request.offering != kNoOffering &&
                        state.catalog().Get(request.offering).sharing == Sharing::kTimeSliced;
        const PodRecord* held = state.FindPodById(pod_id);
        if (held != nullptr && held->source == HoldingSource::kReserved &&
            held->assignment.node == node_name) {
          // kube-scheduler retries a bind whose outcome we could not tell (or runs it twice):
          // the same binding again, so that a committed earlier one reads back as ours.
          refusal = ReserveRefusal::kUnitTaken;
          return held->assignment;
        }
        const NodeState* node = state.FindNode(node_name);
        const NodeFit fit = CheckNode(state, request, node);
        if (!fit.fits()) {
          refusal = RefusalOf(fit.reason);
          return absl::FailedPreconditionError(fit.Message(request));
        }
        // On a DRA node the allocator chose the device: it is verified, not chosen.
        if (const NodeOffering* no = node->Find(request.offering); no != nullptr && no->dra) {
          absl::StatusOr<Assignment> a =
              DraAllocatedUnits(state, claim, request, *node, *no, dra.key,
                                read.has_value() ? &*read : nullptr);
          refusal = a.ok() ? ReserveRefusal::kUnitTaken : ReserveRefusal::kDraRefused;
          return a;
        }
        // Behind a closed agent gate (CheckNode let the pod join the waiting group) the group's
        // units are the only choice; else the policy chooses.
        const ClusterState::AgentGate gate = state.AgentGateOf(*node, request.offering);
        absl::StatusOr<Assignment> a =
            gate.joinable ? *gate.joinable : policy->ChooseUnits(state, request, *node);
        if (!a.ok()) {
          refusal = ReserveRefusal::kNoFit;
          return a;
        }
        d.own_unit = d.time_sliced && JoinsOwnUnit(state, request, *node, *a);
        refusal = ReserveRefusal::kUnitTaken;
        return a;
      },
      host);
  d.refusal = d.assignment.ok() ? ReserveRefusal::kNone : refusal;
  if (!d.assignment.ok()) d.own_unit = false;
  return d;
}

std::vector<bool> DecisionCore::Preempt(const PodObject& pod,
                                        const std::vector<VictimProposal>& proposals) {
  std::vector<bool> fits(proposals.size(), false);
  mirror_->Read([&](const ClusterState& state) {
    const PodRequest request = ResolveOn(state, pod);
    for (size_t i = 0; i < proposals.size(); ++i) {
      if (!request.interested()) {
        fits[i] = true;
        continue;
      }
      if (!request.unresolvable.empty()) continue;
      Evictions evicted;
      for (const std::string& uid : *proposals[i].uids) {
        if (const PodRecord* rec = state.FindPodByUid(uid)) evicted.insert(rec->id);
      }
      fits[i] = CheckNode(state, request, state.FindNode(proposals[i].node), evicted).fits();
    }
  });
  return fits;
}

}  // namespace gse
