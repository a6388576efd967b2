// TaskMixMetrics: fgd's task mix as gauges (task_mix_metrics.h).
#include "extender/task_mix_metrics.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace gse {

namespace {

prometheus::Family<prometheus::Gauge>& OtherHostDemandFamily(prometheus::Registry& registry) {
  return prometheus::BuildGauge()
      .Name("gse_fgd_other_host_demand_ratio")
      .Help("cpu or memory asked by the recently arrived pods without a GPU, per unit asked by "
            "the recent GPU pods: what fgd adds to each idle GPU's host demand")
      .Register(registry);
}

}  // namespace

TaskMixMetrics::TaskMixMetrics(prometheus::Registry& registry, const LearnedFgdPolicy* policy)
    : policy_(policy),
      weight_(prometheus::BuildGauge()
                  .Name("gse_fgd_task_mix_weight")
                  .Help("Share of the task mix the fgd policy scores against, per requested "
                        "resource and amount (learned from the pods seen, decaying; sums to 1)")
                  .Register(registry)),
      cpu_(prometheus::BuildGauge()
               .Name("gse_fgd_task_mix_cpu_cores")
               .Help("Mean cpu request of the pods of a task-mix class, in cores")
               .Register(registry)),
      observed_(&prometheus::BuildGauge()
                     .Name("gse_fgd_task_mix_pods_observed")
                     .Help("Pods the fgd task mix has counted (each pod once)")
                     .Register(registry)
                     .Add({})) {
  prometheus::Family<prometheus::Gauge>& other = OtherHostDemandFamily(registry);
  other_cpu_ = &other.Add({{"resource", "cpu"}});
  other_memory_ = &other.Add({{"resource", "memory"}});
}

void TaskMixMetrics::Refresh() {
  // Classes that differ only in GPU products share a series: labels stay bounded by the
  // catalog's resources and amounts.
  std::map<LabelKey, std::pair<double, double>> values;  // weight, weight x cpu cores
  for (const TaskClass& t : policy_->learner().Current()) {
    auto& [w, c] = values[{t.resource, absl::StrCat(t.amount)}];
    w += t.weight;
    c += t.weight * static_cast<double>(t.cpu_milli) / 1000.0;
  }
  absl::MutexLock lock(&mu_);
  for (auto it = series_.begin(); it != series_.end();) {
    if (values.count(it->first) == 0) {
      weight_.Remove(it->second.first);
      cpu_.Remove(it->second.second);
      it = series_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [key, v] : values) {
    auto [it, added] = series_.try_emplace(key);
    if (added) {
      const std::map<std::string, std::string> labels = {{"resource", key.first}, {"amount", key.second}};
      it->second = {&weight_.Add(labels), &cpu_.Add(labels)};
    }
    it->second.first->Set(v.first);
    it->second.second->Set(v.first > 0 ? v.second / v.first : 0);
  }
  observed_->Set(static_cast<double>(policy_->learner().observed()));
  const auto [cpu, memory] = policy_->OtherHostDemand();
  other_cpu_->Set(cpu);
  other_memory_->Set(memory);
}

}  // namespace gse
