// Unit assignment annotations: writing them for a bind and reading them back from bound pods.
//
// The reader is hostile-input safe: the annotation value comes from the API server, where any
// user with pod-update rights can write anything. Every malformed value is an InvalidArgument
// that names the annotation and the reason; nothing is allocated in proportion to the input
// beyond kMaxUnitsPerPod indices.
#include "state/assignment.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "state/k8s_objects.h"

namespace gse {
namespace {

// Unit indices are 0..9999: at most four digits, so parsing cannot overflow and a hostile
// index cannot make the mirror grow a node's units without bound.
constexpr int32_t kMaxUnitIndex = 9999;
// Error messages quote at most this much of a value (a hostile value may be megabytes).
constexpr size_t kMaxQuotedBytes = 80;

std::string Quote(absl::string_view value) {
  if (value.size() > kMaxQuotedBytes) {
    return absl::StrCat("\"", absl::CHexEscape(value.substr(0, kMaxQuotedBytes)), "\"...");
  }
  return absl::StrCat("\"", absl::CHexEscape(value), "\"");
}

absl::Status Invalid(absl::string_view annotation, absl::string_view value,
                     absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrCat("annotation ", annotation, ": ", Quote(value), ": ", reason));
}

// A canonical decimal: digits only, no sign, no leading zero (except "0" itself), at most
// `max_digits` long. Returns -1 when `text` is not one.
int64_t ParseCanonicalDecimal(absl::string_view text, size_t max_digits) {
  if (text.empty() || text.size() > max_digits) return -1;
  if (text.size() > 1 && text[0] == '0') return -1;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

// Kubernetes node names are DNS-1123 subdomains (lower-case alphanumerics, '-' and '.',
// starting and ending alphanumeric, at most 253 bytes).
std::string NodeNameError(absl::string_view node) {
  if (node.empty()) return "node name is empty";
  if (node.size() > kMaxNameBytes) return "node name is longer than 253 bytes";
  for (char c : node) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.')) {
      return "node name is not a DNS subdomain (lower-case alphanumerics, '-', '.')";
    }
  }
  auto alnum = [](char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c); };
  if (!alnum(node.front()) || !alnum(node.back())) {
    return "node name must start and end with an alphanumeric character";
  }
  return "";
}

}  // namespace

std::string UnitId(absl::string_view node, absl::string_view resource, int32_t index) {
  return absl::StrCat(node, "/", resource, "/", index);
}

std::map<std::string, std::string> AssignmentAnnotations(const Assignment& a, const Catalog& catalog,
                                                         absl::string_view project) {
  // Precondition: `a.offering` belongs to `catalog` (assignments come from Reserve, which
  // checked it). An id outside the catalog still yields a well-formed map rather than UB.
  const Offering* offering = nullptr;
  if (a.offering >= 0 && static_cast<size_t>(a.offering) < catalog.size()) {
    offering = &catalog.Get(a.offering);
  }
  std::map<std::string, std::string> out;
  out[std::string(kAnnotationUnit)] =
      absl::StrCat(a.node, "/", offering ? offering->resource : "", "/", absl::StrJoin(a.units, ","));
  out[std::string(kAnnotationAmount)] = absl::StrCat(a.amount_per_unit);
  if (offering != nullptr) {
    out[std::string(kAnnotationSharing)] = std::string(SharingName(offering->sharing));
    if (!offering->mig_profile.empty()) {
      out[std::string(kAnnotationMigProfile)] = offering->mig_profile;
    }
  }
  out[std::string(kAnnotationProject)] = std::string(project);
  return out;
}

absl::StatusOr<std::string> ParseProjectAnnotation(
    const std::map<std::string, std::string>& annotations) {
  auto it = annotations.find(std::string(kAnnotationProject));
  if (it == annotations.end()) {
    return absl::NotFoundError(absl::StrCat("no ", kAnnotationProject, " annotation"));
  }
  const std::string& value = it->second;
  if (value.empty()) return Invalid(kAnnotationProject, value, "empty");
  if (value.size() > kMaxNameBytes) {
    return Invalid(kAnnotationProject, value, absl::StrCat("longer than ", kMaxNameBytes, " bytes"));
  }
  for (char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return Invalid(kAnnotationProject, value, "contains a control character");
  }
  return value;
}

absl::StatusOr<Assignment> ParseAssignmentAnnotations(
    const std::map<std::string, std::string>& annotations, absl::string_view pod_node,
    const Catalog& catalog) {
  auto unit_it = annotations.find(std::string(kAnnotationUnit));
  if (unit_it == annotations.end()) {
    return absl::NotFoundError(absl::StrCat("no ", kAnnotationUnit, " annotation"));
  }
  const absl::string_view value = unit_it->second;
  const absl::string_view name = kAnnotationUnit;

  // <node>/<resource>/<indices>: the node has no '/', the resource may have several.
  const size_t first = value.find('/');
  const size_t last = value.rfind('/');
  if (first == absl::string_view::npos || first == last) {
    return Invalid(name, value, "want <node>/<resource>/<index>[,<index>...]");
  }
  const absl::string_view node = value.substr(0, first);
  const absl::string_view resource = value.substr(first + 1, last - first - 1);
  const absl::string_view indices = value.substr(last + 1);
  if (std::string err = NodeNameError(node); !err.empty()) return Invalid(name, value, err);
  if (resource.empty()) return Invalid(name, value, "resource name is empty");
  if (indices.empty()) return Invalid(name, value, "no unit index");

  const Offering* offering = catalog.Find(resource);
  if (offering == nullptr) {
    return Invalid(name, value,
                   absl::StrCat("resource ", Quote(resource), " is not in the GPU catalog"));
  }
  if (!pod_node.empty() && node != pod_node) {
    return Invalid(name, value,
                   absl::StrCat("names node ", Quote(node), " but the pod is bound to ",
                                Quote(pod_node)));
  }

  Assignment a;
  a.node = std::string(node);
  a.offering = offering->id;
  // Count before parsing so that 10,000 indices cost one scan, not 10,000 allocations.
  size_t count = 1;
  for (char c : indices) count += (c == ',');
  if (count > static_cast<size_t>(kMaxUnitsPerPod)) {
    return Invalid(name, value,
                   absl::StrCat(count, " unit indices, at most ", kMaxUnitsPerPod, " allowed"));
  }
  a.units.reserve(count);
  size_t pos = 0;
  while (true) {
    size_t comma = indices.find(',', pos);
    absl::string_view part =
        indices.substr(pos, comma == absl::string_view::npos ? absl::string_view::npos : comma - pos);
    int64_t index = ParseCanonicalDecimal(part, 4);
    if (index < 0 || index > kMaxUnitIndex) {
      return Invalid(name, value,
                     absl::StrCat("unit index ", Quote(part),
                                  " is not a decimal 0..9999 without sign or leading zero"));
    }
    if (!a.units.empty() && index <= a.units.back()) {
      return Invalid(name, value, "unit indices must be sorted and distinct");
    }
    a.units.push_back(static_cast<int32_t>(index));
    if (comma == absl::string_view::npos) break;
    pos = comma + 1;
  }

  // The amount annotation may be absent (older writers, hand-made pods): one per unit.
  auto amount_it = annotations.find(std::string(kAnnotationAmount));
  if (amount_it != annotations.end()) {
    int64_t amount = ParseCanonicalDecimal(amount_it->second, 4);
    if (amount < 1 || amount > kMaxAmountPerUnit) {
      return Invalid(kAnnotationAmount, amount_it->second,
                     absl::StrCat("want a decimal 1..", kMaxAmountPerUnit,
                                  " without sign or leading zero"));
    }
    a.amount_per_unit = static_cast<int32_t>(amount);
  }
  return a;
}

}  // namespace gse
