// The candidate lists of filter and prioritize answers, written straight into the answer.
//
// kube-scheduler sends every feasible node with every call (5,000 in a large cluster) and
// expects each of them back: in NodeNames or in one of the failure maps (filter), or in the
// HostPriorityList (prioritize). At that size writing the lists is a good part of a verb's
// cost, so they are not built through a JSON writer: the size of the text is summed first,
// then every entry is copied into space reserved once, the fixed pieces (quotes, keys,
// messages, scores) by fixed-size copies the compiler inlines.
//
// Names are written as the request gave them; one that JSON must escape (never the name of
// a real node, but a client may send anything) is escaped (CandidateNames).
#ifndef GSE_EXTENDER_CANDIDATE_ANSWERS_H_
#define GSE_EXTENDER_CANDIDATE_ANSWERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "scoring/feasibility.h"
#include "scoring/pod_request.h"
#include "scoring/policies.h"

namespace gse {

// The text between the quotes of each name as a JSON string: the names themselves when none
// needs escaping, else escaped copies. `plain`: the caller knows that no name needs escaping
// (StringListMember::plain), else each is checked. `names` must outlive this.
class CandidateNames {
 public:
  CandidateNames(const std::vector<absl::string_view>& names, bool plain);
  CandidateNames(const CandidateNames&) = delete;
  CandidateNames& operator=(const CandidateNames&) = delete;

  size_t size() const { return text_->size(); }
  absl::string_view operator[](size_t i) const { return (*text_)[i]; }

 private:
  std::vector<std::string> escaped_;           // empty when no name needs escaping
  std::vector<absl::string_view> escaped_views_;
  const std::vector<absl::string_view>* text_;  // the names, or views of escaped_
};

// Appends filter's verdict members, one entry per candidate (`verdicts[i]` for `names[i]`):
//   "NodeNames":["<passing>",...],"FailedNodes":{"<name>":"<message>",...},
//   "FailedAndUnresolvableNodes":{...}
// With `list_passing` false (the answer carries Node objects instead) NodeNames is null.
// A failing node goes to FailedAndUnresolvableNodes when preemption cannot help
// (NodeFit::unresolvable()), with NodeFit::Message(request) as its message. A name given
// twice appears twice; Go's decoder keeps either, they carry the same message.
void AppendFilterVerdicts(std::string& out, const CandidateNames& names,
                          const std::vector<FitReason>& verdicts, const PodRequest& request,
                          bool list_passing);

// Appends prioritize's HostPriorityList, every candidate in input order:
//   [{"Host":"<name>","Score":<n>},...]
// Scores must be within 0..kMaxExtenderPriority.
void AppendHostPriorityList(std::string& out, const CandidateNames& names,
                            const std::vector<int64_t>& scores);

}  // namespace gse

#endif  // GSE_EXTENDER_CANDIDATE_ANSWERS_H_
