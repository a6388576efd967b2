// TaskMixMetrics: the task mix the service's fgd policy uses (scoring/task_mix.h) as gauges,
// refreshed by Refresh(), which main calls with the mirror's periodic metrics.
//   gse_fgd_task_mix_weight{resource, amount}  share of the mix (the series sum to 1)
//   gse_fgd_task_mix_cpu_cores{resource, amount}  mean cpu of that class's pods
//   gse_fgd_task_mix_pods_observed  pods counted so far (each pod once)
//   gse_fgd_other_host_demand_ratio{resource}  cpu or memory asked by recent pods without a
//     GPU per unit asked by recent GPU pods, as the policy in use counts them beside each GPU
// Series are bounded by TaskMixOptions::max_classes; classes that leave the mix are removed.
// Thread-safe: Refresh() may run concurrently with scrapes (gauges are atomic; the series
// this class manages are guarded by mu_).
#ifndef GSE_EXTENDER_TASK_MIX_METRICS_H_
#define GSE_EXTENDER_TASK_MIX_METRICS_H_

#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "scoring/task_mix.h"

namespace gse {

class TaskMixMetrics {
 public:
  // `policy` must outlive this object.
  TaskMixMetrics(prometheus::Registry& registry, const LearnedFgdPolicy* policy);
  void Refresh();

 private:
  using LabelKey = std::pair<std::string, std::string>;  // resource, amount
  const LearnedFgdPolicy* policy_;
  prometheus::Family<prometheus::Gauge>& weight_;
  prometheus::Family<prometheus::Gauge>& cpu_;
  prometheus::Gauge* observed_;
  prometheus::Gauge* other_cpu_;
  prometheus::Gauge* other_memory_;

  absl::Mutex mu_;
  std::map<LabelKey, std::pair<prometheus::Gauge*, prometheus::Gauge*>> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gse

#endif  // GSE_EXTENDER_TASK_MIX_METRICS_H_
