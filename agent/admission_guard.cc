// AdmissionGuard: attribution of kubelet's anonymous calls to pending pods.
#include "agent/admission_guard.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gse::agent {

const char* AdmissionOutcomeName(AdmissionOutcome outcome) {
  switch (outcome) {
    case AdmissionOutcome::kAllocated: return "allocated";
    case AdmissionOutcome::kNoCandidate: return "no_candidate";
    case AdmissionOutcome::kAmbiguous: return "ambiguous";
    case AdmissionOutcome::kRefused: return "refused";
  }
  return "refused";
}

struct AdmissionGuard::Decision {
  AdmissionOutcome outcome = AdmissionOutcome::kNoCandidate;  // kAllocated: one group
  Entitlement rep;
  int64_t held = 0;
  UnitUse use{0};
  std::string message;
};

namespace {

constexpr size_t kMaxNamedCandidates = 4;

bool Live(const NodePod& pod, absl::string_view node) {
  return !pod.Terminal() && !pod.terminating && pod.node == node;
}

// Device IDs of `resource` per pod key: pod-resources view plus bookings.
template <typename Bookings>
std::map<std::string, std::set<std::string>> HeldIds(const std::vector<ContainerDeviceIds>& view,
                                                     const Bookings& bookings,
                                                     const std::string& resource) {
  std::map<std::string, std::set<std::string>> held;
  for (const ContainerDeviceIds& c : view) {
    if (c.resource != resource) continue;
    held[c.PodKey()].insert(c.ids.begin(), c.ids.end());
  }
  for (const auto& b : bookings) {
    if (b.resource != resource) continue;
    held[b.pod_key].insert(b.ids.begin(), b.ids.end());
  }
  return held;
}

// Who uses the units, leaving out `exclude` (the pod being judged).
UnitUse BuildUse(const ServedOffering& offering, const Catalog& catalog, absl::string_view node,
                 const std::vector<NodePod>& pods,
                 const std::map<std::string, std::set<std::string>>& held,
                 absl::string_view exclude) {
  UnitUse use(offering.units().size());
  for (const NodePod& pod : pods) {
    if (!Live(pod, node)) continue;
    const std::string key = pod.Key();
    if (key == exclude) continue;
    std::optional<Entitlement> e = EntitlementFor(pod, node, offering, catalog);
    if (e.has_value() && e->error.empty()) {
      for (int32_t u : e->units) use.annotated[static_cast<size_t>(u)] = true;
    }
    auto it = held.find(key);
    if (it == held.end()) continue;
    const std::string project = e.has_value() ? e->project : pod.namespace_name;
    for (const std::string& id : it->second) {
      std::optional<DeviceRef> ref = offering.Find(id);
      if (!ref.has_value()) continue;
      use.holders[static_cast<size_t>(ref->unit)][key] += 1;
      use.projects[static_cast<size_t>(ref->unit)].insert(project);
    }
  }
  return use;
}

std::string Describe(const Entitlement& e) {
  if (!e.error.empty()) return absl::StrCat(e.pod_key, " (unusable annotation)");
  if (!e.annotated) return absl::StrCat(e.pod_key, " (no unit annotation)");
  return absl::StrCat(e.pod_key, " (unit ", absl::StrJoin(e.units, ","), ")");
}

}  // namespace

AdmissionGuard::AdmissionGuard(const Catalog* catalog, PodSource* pods,
                               PodResourcesSource* pod_resources, AdmissionOptions options)
    : catalog_(catalog), pods_(pods), pod_resources_(pod_resources), options_(std::move(options)) {}

AdmissionGuard::Decision AdmissionGuard::Decide(const ServedOffering& offering,
                                                const std::vector<NodePod>& pods) const {
  const auto held = HeldIds(view_, bookings_, offering.resource());
  struct Pending {
    Entitlement e;
    int64_t held;
  };
  std::vector<Pending> pending;
  for (const NodePod& pod : pods) {
    if (!Live(pod, options_.node)) continue;
    std::optional<Entitlement> e = EntitlementFor(pod, options_.node, offering, *catalog_);
    if (!e.has_value()) continue;
    auto it = held.find(e->pod_key);
    const int64_t n = it == held.end() ? 0 : static_cast<int64_t>(it->second.size());
    if (n < e->need) pending.push_back(Pending{*std::move(e), n});
  }
  // Oldest first: the representative of a group is its oldest pod (a stable, logged choice).
  std::sort(pending.begin(), pending.end(), [](const Pending& a, const Pending& b) {
    return std::tie(a.e.creation_timestamp, a.e.pod_key) <
           std::tie(b.e.creation_timestamp, b.e.pod_key);
  });
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < pending.size(); ++i) {
    bool placed = false;
    for (auto& g : groups) {
      if (Equivalent(pending[g.front()].e, pending[i].e)) {
        g.push_back(i);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({i});
  }
  Decision d;
  if (groups.empty()) {
    d.outcome = AdmissionOutcome::kNoCandidate;
    d.message = absl::StrCat("no pod bound to node ", options_.node, " waits for ",
                             offering.resource(),
                             ", so the pod kubelet is admitting cannot be identified; refusing");
    return d;
  }
  if (groups.size() > 1) {
    std::vector<std::string> names;
    for (size_t g = 0; g < groups.size() && g < kMaxNamedCandidates; ++g) {
      names.push_back(Describe(pending[groups[g].front()].e));
    }
    if (groups.size() > kMaxNamedCandidates) {
      names.push_back(absl::StrCat("and ", groups.size() - kMaxNamedCandidates, " more"));
    }
    d.outcome = AdmissionOutcome::kAmbiguous;
    d.message = absl::StrCat(
        "cannot tell which pod kubelet is admitting for ", offering.resource(), " on node ",
        options_.node, ": pods ", absl::StrJoin(names, ", "),
        " wait for different units; refusing so that no pod gets another pod's unit");
    return d;
  }
  d.outcome = AdmissionOutcome::kAllocated;
  d.rep = pending[groups.front().front()].e;
  d.held = pending[groups.front().front()].held;
  d.use = BuildUse(offering, *catalog_, options_.node, pods, held, d.rep.pod_key);
  return d;
}

absl::Status AdmissionGuard::Refresh(absl::Time call_started) {
  // A pod-resources error leaves the old view in place: held IDs only grow until kubelet's
  // book shows them, so a stale view can only make a pod look less satisfied.
  absl::Status pods = pods_->Resync(options_.resync_timeout);
  auto view = pod_resources_->List(options_.pod_resources_timeout);
  // Kubelet admits one container at a time and records each allocation before it makes the
  // next admission's calls, so a booking made before this call that the fresh view does not
  // show will never be recorded: its pod was removed (a stale admission of a deleted pod) or
  // its admission failed. Kept, it would count the unit as held by the pod the agent
  // attributed it to, which then could not be admitted at all. (Kubelet may re-allocate
  // concurrently on a pod worker; a booking dropped too early there only makes a pod look
  // unsatisfied, and PreStartContainer still checks the devices kubelet recorded.)
  if (view.ok()) ApplyView(*std::move(view), call_started);
  return pods;
}

std::vector<std::string> AdmissionGuard::PreferredAllocation(
    const ServedOffering& offering, const std::vector<std::string>& available,
    const std::vector<std::string>& must_include, int32_t size) {
  const absl::Time called = absl::Now();
  std::vector<NodePod> pods = pods_->Snapshot();
  {
    absl::MutexLock lock(&mu_);
    Decision d = Decide(offering, pods);
    if (d.outcome == AdmissionOutcome::kAllocated) {
      return PreferredIds(d.rep, offering, d.use, available, must_include, size);
    }
  }
  (void)Refresh(called);  // a preference only: Allocate decides on a fresh list
  pods = pods_->Snapshot();
  absl::MutexLock lock(&mu_);
  Decision d = Decide(offering, pods);
  if (d.outcome == AdmissionOutcome::kAllocated) {
    return PreferredIds(d.rep, offering, d.use, available, must_include, size);
  }
  return must_include;  // undecidable: Allocate will refuse whatever kubelet picks
}

AdmissionResult AdmissionGuard::Allocate(const ServedOffering& offering,
                                         const std::vector<std::string>& ids) {
  AdmissionResult result;
  // Kubelet learns of a binding from its own watch, which may be ahead of the agent's: the
  // pod being admitted can be missing from the agent's view while another pod, bound
  // earlier and admitted later (kubelet orders a batch by creation time), waits there for
  // a different unit. Deciding on that view would give the admitted pod the other pod's
  // unit, which PreStartContainer then refuses for good (kubelet does not allocate again),
  // so the pod would neither run nor fail. The decision is therefore made on a fresh list,
  // a consistent read that holds every binding kubelet can have seen; without one there is
  // no safe decision.
  result.refreshed = true;
  if (absl::Status fresh = Refresh(absl::Now()); !fresh.ok()) {
    result.outcome = AdmissionOutcome::kRefused;
    result.status = absl::UnavailableError(absl::StrCat(
        "cannot list the pods bound to node ", options_.node, " to tell which pod kubelet is ",
        "admitting for ", offering.resource(), " (", fresh.message(), "); refusing"));
    return result;
  }
  std::vector<NodePod> pods = pods_->Snapshot();
  absl::MutexLock lock(&mu_);
  Decision d = Decide(offering, pods);
  if (d.outcome != AdmissionOutcome::kAllocated) {
    result.outcome = d.outcome;
    result.status = absl::FailedPreconditionError(d.message);
    return result;
  }
  result.pod_key = d.rep.pod_key;
  absl::Status fit = CheckIdsFit(d.rep, offering, d.use, ids, d.held);
  if (!fit.ok()) {
    result.outcome = AdmissionOutcome::kRefused;
    result.status = fit;
    return result;
  }
  result.outcome = AdmissionOutcome::kAllocated;
  result.status = absl::OkStatus();
  for (const std::string& id : ids) result.refs.push_back(*offering.Find(id));
  bookings_.push_back(Booking{d.rep.pod_key, offering.resource(), ids, absl::Now()});
  return result;
}

AdmissionResult AdmissionGuard::VerifyPreStart(const ServedOffering& offering,
                                               const std::vector<std::string>& ids) {
  AdmissionResult result;
  auto view = pod_resources_->List(options_.prestart_timeout);
  if (!view.ok()) {
    result.status = view.status();
    return result;
  }
  const std::set<std::string> wanted(ids.begin(), ids.end());
  std::set<std::string> owners;
  for (const ContainerDeviceIds& c : *view) {
    if (c.resource != offering.resource()) continue;
    const std::set<std::string> have(c.ids.begin(), c.ids.end());
    if (std::includes(have.begin(), have.end(), wanted.begin(), wanted.end())) {
      owners.insert(c.PodKey());
    }
  }
  UpdatePodResources(*view);
  if (owners.empty()) {
    result.status = absl::UnavailableError(absl::StrCat(
        "devices ", absl::StrJoin(ids, ","), " of ", offering.resource(),
        " are not yet recorded in kubelet's pod-resources; the start will be retried"));
    return result;
  }
  if (owners.size() > 1) {
    result.status = absl::PermissionDeniedError(
        absl::StrCat("devices ", absl::StrJoin(ids, ","), " are recorded for several pods: ",
                     absl::StrJoin(owners, ", ")));
    return result;
  }
  result.pod_key = *owners.begin();
  auto find_pod = [&](const std::vector<NodePod>& pods) -> const NodePod* {
    for (const NodePod& p : pods) {
      if (p.Key() == result.pod_key) return &p;
    }
    return nullptr;
  };
  std::vector<NodePod> pods = pods_->Snapshot();
  if (find_pod(pods) == nullptr) {
    (void)pods_->Resync(options_.resync_timeout);
    pods = pods_->Snapshot();
  }
  const NodePod* pod = find_pod(pods);
  if (pod == nullptr) {
    result.status = absl::UnavailableError(
        absl::StrCat("pod ", result.pod_key, " is not known to the agent yet; retried"));
    return result;
  }
  std::optional<Entitlement> e = EntitlementFor(*pod, options_.node, offering, *catalog_);
  if (!e.has_value()) {
    result.status = absl::PermissionDeniedError(absl::StrCat(
        "pod ", result.pod_key, " received ", offering.resource(), " but does not request it"));
    return result;
  }
  absl::MutexLock lock(&mu_);
  const auto held = HeldIds(view_, bookings_, offering.resource());
  UnitUse use = BuildUse(offering, *catalog_, options_.node, pods, held, result.pod_key);
  auto it = held.find(result.pod_key);
  const int64_t held_before =
      std::max<int64_t>(0, (it == held.end() ? 0 : static_cast<int64_t>(it->second.size())) -
                               static_cast<int64_t>(wanted.size()));
  result.status = CheckIdsFit(*e, offering, use, ids, held_before);
  result.outcome = result.status.ok() ? AdmissionOutcome::kAllocated : AdmissionOutcome::kRefused;
  if (result.status.ok()) {
    for (const std::string& id : ids) result.refs.push_back(*offering.Find(id));
  }
  return result;
}

void AdmissionGuard::UpdatePodResources(std::vector<ContainerDeviceIds> view) {
  ApplyView(std::move(view), absl::Now() - options_.booking_grace);
}

void AdmissionGuard::ApplyView(std::vector<ContainerDeviceIds> view,
                               absl::Time unrecorded_before) {
  absl::MutexLock lock(&mu_);
  std::set<std::pair<std::string, std::string>> shown;  // (resource, id)
  for (const ContainerDeviceIds& c : view) {
    for (const std::string& id : c.ids) shown.emplace(c.resource, id);
  }
  bookings_.erase(std::remove_if(bookings_.begin(), bookings_.end(),
                                 [&](const Booking& b) {
                                   if (b.made < unrecorded_before) return true;
                                   for (const std::string& id : b.ids) {
                                     if (shown.count({b.resource, id}) == 0) return false;
                                   }
                                   return true;
                                 }),
                  bookings_.end());
  view_ = std::move(view);
}

size_t AdmissionGuard::bookings() const {
  absl::MutexLock lock(&mu_);
  return bookings_.size();
}

}  // namespace gse::agent
