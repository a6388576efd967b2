// The fgd task mix learned online (task_mix.h).
#include "scoring/task_mix.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rapidjson/document.h"
#include "state/json_reader.h"
#include "state/quantity.h"

namespace gse {
namespace {

// Weights are kept growing (the newest pod weighs next_weight_) instead of decaying every
// class on every pod; past this they are scaled back down to keep doubles precise.
constexpr double kRenormaliseAbove = 1e12;

absl::Status Invalid(size_t i, absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("tasks[", i, "]: ", field, ": ", why));
}

absl::Status ReadQuantityField(const rapidjson::Value& task, size_t i, const char* field,
                               int64_t* out) {
  auto it = task.FindMember(field);
  if (it == task.MemberEnd()) return absl::OkStatus();
  if (!it->value.IsString()) return Invalid(i, field, "must be a quantity string such as \"8\" or \"32Gi\"");
  absl::StatusOr<int64_t> q = ParseQuantityMilli(it->value.GetString());
  if (!q.ok()) return Invalid(i, field, q.status().message());
  if (*q < 0) return Invalid(i, field, "must not be negative");
  *out = *q;
  return absl::OkStatus();
}

absl::StatusOr<TaskClass> ParseTask(const rapidjson::Value& task, size_t i) {
  if (!task.IsObject()) return Invalid(i, "task", "must be an object");
  for (auto m = task.MemberBegin(); m != task.MemberEnd(); ++m) {
    const std::string key(m->name.GetString(), m->name.GetStringLength());
    if (key != "resource" && key != "amount" && key != "weight" && key != "cpu" &&
        key != "memory" && key != "products") {
      return Invalid(i, key, "unknown field (resource, amount, weight, cpu, memory, products)");
    }
  }
  TaskClass t;
  auto resource = task.FindMember("resource");
  if (resource == task.MemberEnd() || !resource->value.IsString()) {
    return Invalid(i, "resource", "missing (a catalog resource name)");
  }
  t.resource = resource->value.GetString();
  if (auto a = task.FindMember("amount"); a != task.MemberEnd()) {
    if (!a->value.IsInt64()) return Invalid(i, "amount", "must be an integer");
    t.amount = a->value.GetInt64();
  }
  if (auto w = task.FindMember("weight"); w != task.MemberEnd()) {
    if (!w->value.IsNumber() || !(w->value.GetDouble() >= 0) || !std::isfinite(w->value.GetDouble())) {
      return Invalid(i, "weight", "must be a finite number >= 0");
    }
    t.weight = w->value.GetDouble();
  }
  if (absl::Status s = ReadQuantityField(task, i, "cpu", &t.cpu_milli); !s.ok()) return s;
  // The policy counts memory in bytes x 1000, as the quantity's milli-units are.
  if (absl::Status s = ReadQuantityField(task, i, "memory", &t.memory_milli); !s.ok()) return s;
  if (auto p = task.FindMember("products"); p != task.MemberEnd()) {
    if (!p->value.IsArray()) return Invalid(i, "products", "must be an array of strings");
    for (const auto& v : p->value.GetArray()) {
      if (!v.IsString()) return Invalid(i, "products", "must be an array of strings");
      t.products.emplace_back(v.GetString(), v.GetStringLength());
    }
    std::sort(t.products.begin(), t.products.end());
  }
  return t;
}

}  // namespace

absl::StatusOr<std::vector<TaskClass>> ParseTaskMix(absl::string_view json) {
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonLimited(json, doc); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("document: ", s.message()));
  }
  if (!doc.IsObject()) return absl::InvalidArgumentError("document: must be a JSON object");
  for (auto m = doc.MemberBegin(); m != doc.MemberEnd(); ++m) {
    if (absl::string_view(m->name.GetString(), m->name.GetStringLength()) != "tasks") {
      return absl::InvalidArgumentError(absl::StrCat(
          "document: ", m->name.GetString(), ": unknown field (the only one is \"tasks\")"));
    }
  }
  auto tasks = doc.FindMember("tasks");
  if (tasks == doc.MemberEnd() || !tasks->value.IsArray() || tasks->value.Empty()) {
    return absl::InvalidArgumentError("tasks: must be a non-empty array");
  }
  std::vector<TaskClass> out;
  for (rapidjson::SizeType i = 0; i < tasks->value.Size(); ++i) {
    absl::StatusOr<TaskClass> t = ParseTask(tasks->value[i], i);
    if (!t.ok()) return t.status();
    out.push_back(*std::move(t));
  }
  return out;
}

// ---- the learner

TaskMixLearner::TaskMixLearner(std::vector<TaskClass> seed, TaskMixOptions options)
    : options_(options), growth_(std::exp2(1.0 / std::max(1.0, options.half_life_pods))) {
  double total = 0;
  for (const TaskClass& t : seed) total += t.weight;
  absl::MutexLock lock(&mu_);
  for (TaskClass& t : seed) {
    const double w = total > 0 ? options_.seed_pods * t.weight / total : 0;
    std::sort(t.products.begin(), t.products.end());
    Sums& s = classes_[Key{t.resource, t.amount, t.products}];
    s.weight += w;
    s.cpu += w * static_cast<double>(t.cpu_milli);
    s.memory += w * static_cast<double>(t.memory_milli);
  }
}

bool TaskMixLearner::Observe(absl::string_view uid, const TaskClass& pod) {
  absl::MutexLock lock(&mu_);
  if (!uid.empty()) {
    if (!recent_.insert(std::string(uid)).second) return false;
    recent_order_.emplace_back(uid);
    if (recent_order_.size() > kRecentUids) {
      recent_.erase(recent_order_.front());
      recent_order_.pop_front();
    }
  }
  std::vector<std::string> products = pod.products;
  std::sort(products.begin(), products.end());
  Key key{pod.resource, pod.amount, std::move(products)};
  auto it = classes_.find(key);
  if (it == classes_.end() && classes_.size() >= options_.max_classes) {
    // Room for the new class: the lightest one leaves.
    auto lightest = std::min_element(classes_.begin(), classes_.end(), [](const auto& a, const auto& b) {
      return a.second.weight < b.second.weight;
    });
    classes_.erase(lightest);
  }
  Sums& s = it != classes_.end() ? it->second : classes_[std::move(key)];
  s.weight += next_weight_;
  s.cpu += next_weight_ * static_cast<double>(pod.cpu_milli);
  s.memory += next_weight_ * static_cast<double>(pod.memory_milli);
  next_weight_ *= growth_;
  if (next_weight_ > kRenormaliseAbove) Renormalise();
  ++observed_;
  return true;
}

void TaskMixLearner::Renormalise() {
  const double scale = 1 / next_weight_;
  for (auto& [key, s] : classes_) {
    s.weight *= scale;
    s.cpu *= scale;
    s.memory *= scale;
  }
  next_weight_ = 1;
}

std::vector<TaskClass> TaskMixLearner::Current() const {
  absl::MutexLock lock(&mu_);
  double total = 0;
  for (const auto& [key, s] : classes_) total += s.weight;
  std::vector<TaskClass> out;
  for (const auto& [key, s] : classes_) {
    if (s.weight <= 0) continue;
    TaskClass t;
    t.resource = std::get<0>(key);
    t.amount = std::get<1>(key);
    t.products = std::get<2>(key);
    t.weight = s.weight / total;
    t.cpu_milli = std::llround(s.cpu / s.weight);
    t.memory_milli = std::llround(s.memory / s.weight);
    out.push_back(std::move(t));
  }
  return out;
}

int64_t TaskMixLearner::observed() const {
  absl::MutexLock lock(&mu_);
  return observed_;
}

bool TaskOfRequest(const Catalog& catalog, const PodRequest& request,
                   const std::vector<std::string>& products, TaskClass* out) {
  if (request.offering == kNoOffering || !request.unresolvable.empty() || request.amount <= 0) {
    return false;
  }
  out->resource = catalog.Get(request.offering).resource;
  out->amount = request.amount;
  out->products = products;
  out->weight = 1;
  out->cpu_milli = request.host_known ? request.host.cpu_milli : 0;
  out->memory_milli = request.host_known ? request.host.memory_bytes * 1000 : 0;
  return true;
}

// ---- the policy

LearnedFgdPolicy::LearnedFgdPolicy(std::shared_ptr<const Catalog> catalog,
                                   std::vector<TaskClass> seed, TaskMixOptions options,
                                   HostFreeFn host_free,
                                   std::vector<std::pair<std::string, std::string>> twins)
    : catalog_(std::move(catalog)),
      options_(options),
      host_free_(std::move(host_free)),
      twins_(std::move(twins)),
      learner_(std::move(seed), options) {}

absl::StatusOr<std::unique_ptr<LearnedFgdPolicy>> LearnedFgdPolicy::Create(
    std::shared_ptr<const Catalog> catalog, std::vector<TaskClass> seed, TaskMixOptions options,
    HostFreeFn host_free, std::vector<std::pair<std::string, std::string>> twins) {
  FragmentationOptions fo;
  fo.tasks = seed;
  fo.host_free = host_free;
  fo.twins = twins;
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> first = MakeFragmentationPolicy(catalog, fo);
  if (!first.ok()) return first.status();
  std::unique_ptr<LearnedFgdPolicy> p(new LearnedFgdPolicy(std::move(catalog), std::move(seed), options,
                                                           std::move(host_free), std::move(twins)));
  absl::MutexLock lock(&p->mu_);
  p->current_ = std::shared_ptr<const PlacementPolicy>(*std::move(first));
  return p;
}

std::shared_ptr<const PlacementPolicy> LearnedFgdPolicy::Current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

std::vector<std::string> AcceptedGpuProducts(const PodObject& pod) {
  static constexpr absl::string_view kProduct = "nvidia.com/gpu.product";
  if (auto it = pod.node_selector.find(std::string(kProduct)); it != pod.node_selector.end()) {
    return {it->second};
  }
  std::vector<std::string> products;
  for (const std::vector<NodeSelectorRequirement>& term : pod.required_node_terms) {
    auto in = std::find_if(term.begin(), term.end(), [](const NodeSelectorRequirement& r) {
      return r.key == kProduct && r.op == "In";
    });
    if (in == term.end()) return {};  // this term lets the pod onto any product
    products.insert(products.end(), in->values.begin(), in->values.end());
  }
  std::sort(products.begin(), products.end());
  products.erase(std::unique(products.begin(), products.end()), products.end());
  return products;
}

namespace {

// `other` per unit of `gpu`, within FragmentationOptions' range; 0 before any GPU pod.
double OtherPerGpuDemand(double other, double gpu) {
  if (!(gpu > 0) || !(other > 0)) return 0;
  return std::min(kMaxOtherHostDemand, other / gpu);
}

}  // namespace

void LearnedFgdPolicy::ObservePending(const PodObject& pod, const PodRequest& request,
                                      const ClusterOutlook& outlook) const {
  TaskClass task;
  if (!TaskOfRequest(*catalog_, request, AcceptedGpuProducts(pod), &task)) return;
  if (!learner_.Observe(pod.uid, task)) return;
  {
    absl::MutexLock lock(&mu_);
    if (++since_publish_ < options_.republish_every) return;
    since_publish_ = 0;
  }
  FragmentationOptions fo;
  fo.tasks = learner_.Current();
  fo.host_free = host_free_;
  fo.twins = twins_;
  const ClusterState::RecentHostDemand& recent = outlook.recent_host_demand;
  fo.other_cpu_per_task_cpu = OtherPerGpuDemand(recent.other_cpu_milli, recent.gpu_cpu_milli);
  fo.other_memory_per_task_memory = OtherPerGpuDemand(recent.other_memory_bytes, recent.gpu_memory_bytes);
  fo.open_units = outlook.open_units;
  // Every class comes from a resolved request of this catalog, or from the seed that Create
  // accepted, and the ratios are in range: a failure would be a bug; the current policy
  // then stays.
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> next = MakeFragmentationPolicy(catalog_, fo);
  if (!next.ok()) return;
  absl::MutexLock lock(&mu_);
  current_ = std::shared_ptr<const PlacementPolicy>(*std::move(next));
  other_cpu_ = fo.other_cpu_per_task_cpu;
  other_memory_ = fo.other_memory_per_task_memory;
}

std::pair<double, double> LearnedFgdPolicy::OtherHostDemand() const {
  absl::MutexLock lock(&mu_);
  return {other_cpu_, other_memory_};
}

std::vector<std::string> ServicePolicyNames() {
  std::vector<std::string> names = PolicyNames();
  names.emplace_back("fgd");
  return names;
}

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakeServicePolicy(
    absl::string_view name, std::shared_ptr<const Catalog> catalog, ServicePolicyOptions options) {
  if (name == "fgd") {
    if (catalog == nullptr) return absl::InvalidArgumentError("fgd: no catalog");
    std::vector<TaskClass> seed =
        options.fgd_seed.empty() ? CatalogTaskMix(*catalog) : std::move(options.fgd_seed);
    absl::StatusOr<std::unique_ptr<LearnedFgdPolicy>> p =
        LearnedFgdPolicy::Create(std::move(catalog), std::move(seed), options.fgd_mix, MirrorHostFree,
                                 std::move(options.fgd_twins));
    if (!p.ok()) return p.status();
    return std::unique_ptr<PlacementPolicy>(*std::move(p));
  }
  for (const std::string& known : PolicyNames()) {
    if (name == known) return MakePolicy(name);
  }
  return absl::InvalidArgumentError(absl::StrCat("placement policy: unknown name \"", name,
                                                 "\"; known: ",
                                                 absl::StrJoin(ServicePolicyNames(), ", ")));
}

}  // namespace gse
