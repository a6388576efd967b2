// GPU catalog: parsing, validation and lookup (contract in catalog.h; reference in
// docs/catalog.md).
//
// Catalog file format (YAML; or JSON, which is YAML: a document whose first character after
// whitespace is `{` must then be strict RFC 8259 JSON, as every JSON input is):
//
//   apiVersion: gpu.themelio.io/v1       # required, exactly this value
//   kind: GpuCatalog                     # required, exactly this value
//   offerings:                           # required, 1..1000 entries, kept in file order
//   - resource: nvidia.com/mig-1g.5gb.shared  # required: Kubernetes extended resource name
//     aliases: [example.com/old-name]    # optional: other names for the same offering
//     unit: mig                          # gpu (default) | mig
//     sharing: time-sliced               # exclusive (default) | time-sliced | mps
//     replicas: 4                        # default 1; 1 for exclusive; 1..1024
//     product: NVIDIA-A100-SXM4-40GB     # optional prefix of the node's GPU product label
//     migProfile: 1g.5gb                 # required iff unit is mig: <n>g.<m>gb[+attr]
//     memory: 5Gi                        # optional display quantity (per unit)
//     deviceClass: mig-1g-5gb.shared.nvidia.com  # optional DRA DeviceClass (DNS subdomain)
//     displayName: "A100 MIG 1g.5gb (shared)"    # optional, <= 256 bytes, no control chars
//     quotaKey: requests.nvidia.com/mig-1g.5gb.shared  # default requests.<resource>
//     nodeSelector: {key: value}         # optional, <= 64 Kubernetes label pairs
//     mpsSingleProject: false            # optional; may be true only for sharing mps
//
// Unknown fields (top level or inside an offering) and repeated fields are errors, so a typo
// never silently turns into a default. Strict scalar types: replicas is a plain integer
// (a quoted "4" is a string and rejected), mpsSingleProject is true or false, and a string
// field rejects a mapping or list. A null value (`memory:` or `memory: ~`) means "not set".
//
// Limits protect the process that loads the file (every check happens before yaml-cpp sees
// the text, because yaml-cpp recurses once per nesting level and allocates ~500 bytes per
// node: a 4 MiB list of `1,` costs it about 1 GB):
//   * at most 4 MiB of UTF-8 text: no invalid UTF-8, no NUL or other control character but
//     tab, LF and CR (YAML refuses them too; yaml-cpp does not check);
//   * nesting at most 32 levels (a catalog needs about 5) by a conservative lexical count;
//   * at most 100,000 YAML tokens (a 1,000-offering catalog needs about 50,000);
//   * at most 1,000 offerings, 64 aliases and 64 nodeSelector entries per offering, 1 KiB
//     per string value (so that YAML aliases `*x` cannot multiply one huge string).
// yaml-cpp reports errors by throwing; every exception is caught here and becomes an
// InvalidArgument status with the line and column. The text goes through
// LoadOneYamlDocument (yaml_document.h), never yaml-cpp's LoadAll, which loops for ever on a
// stray ',' where a node should start (`!Th,e*`, found by fuzz/catalog_fuzz).
#include "state/catalog.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rapidjson/document.h"
#include "state/json_reader.h"
#include "state/yaml_document.h"
#include "yaml-cpp/yaml.h"

namespace gse {
namespace {

constexpr absl::string_view kApiVersion = "gpu.themelio.io/v1";
constexpr absl::string_view kKind = "GpuCatalog";
constexpr size_t kMaxDocumentBytes = size_t{4} << 20;
constexpr size_t kMaxOfferings = 1000;
constexpr int kMaxReplicas = 1024;
constexpr size_t kMaxDepth = 32;
constexpr size_t kMaxTokens = 100000;
constexpr size_t kMaxAliases = 64;
constexpr size_t kMaxSelectorEntries = 64;
constexpr size_t kMaxScalarBytes = 1024;
constexpr size_t kMaxDisplayNameBytes = 256;
constexpr size_t kMaxMemoryBytes = 32;
constexpr absl::string_view kQuotaPrefix = "requests.";

// ---------------------------------------------------------------------------------------
// Message helpers. User text is echoed escaped and truncated so that an error message
// stays one readable line whatever the input held (unicode, control bytes, megabytes).

std::string Printable(absl::string_view s) {
  constexpr size_t kMaxEcho = 80;
  bool truncated = s.size() > kMaxEcho;
  if (truncated) s = s.substr(0, kMaxEcho);
  std::string out = absl::CHexEscape(s);
  if (truncated) out += "...";
  return out;
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", Printable(s), "\""); }

std::string OfferingLabel(size_t index, absl::string_view resource) {
  if (resource.empty()) return absl::StrCat("offerings[", index, "]");
  return absl::StrCat("offerings[", index, "] (", Printable(resource), ")");
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Kubernetes name rules (k8s.io/apimachinery/pkg/util/validation), ASCII only.

namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAsciiAlnum(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }

// IsDNS1123Subdomain: <= 253 chars of [a-z0-9]([-a-z0-9]*[a-z0-9])? joined by '.'.
std::string Dns1123SubdomainError(absl::string_view s) {
  if (s.empty()) return "must not be empty";
  if (s.size() > 253) return absl::StrCat("must be at most 253 characters, got ", s.size());
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    absl::string_view label =
        s.substr(start, dot == absl::string_view::npos ? absl::string_view::npos : dot - start);
    bool ok =
        !label.empty() && IsLowerAlnum(label.front()) && IsLowerAlnum(label.back()) &&
        std::all_of(label.begin(), label.end(), [](char c) { return IsLowerAlnum(c) || c == '-'; });
    if (!ok) {
      return "must be a lowercase DNS subdomain (a-z, 0-9, '-' and '.', each dot-separated "
             "part starting and ending with a letter or digit)";
    }
    if (dot == absl::string_view::npos) return "";
    start = dot + 1;
  }
}

// The name part of a qualified name (and a non-empty label value):
// <= 63 chars of ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9].
std::string NamePartError(absl::string_view s) {
  if (s.empty()) return "must not be empty";
  if (s.size() > 63) return absl::StrCat("must be at most 63 characters, got ", s.size());
  bool ok = IsAsciiAlnum(s.front()) && IsAsciiAlnum(s.back()) &&
            std::all_of(s.begin(), s.end(),
                        [](char c) { return IsAsciiAlnum(c) || c == '-' || c == '_' || c == '.'; });
  if (!ok) {
    return "must consist of letters, digits, '-', '_' or '.', and start and end with a "
           "letter or digit";
  }
  return "";
}

}  // namespace

// IsQualifiedName: [<dns subdomain>/]<name part>; used for label keys.
std::string QualifiedNameError(absl::string_view s) {
  if (s.empty()) return "must not be empty";
  size_t slash = s.find('/');
  if (slash == absl::string_view::npos) {
    std::string err = NamePartError(s);
    return err.empty() ? "" : absl::StrCat("name part ", err);
  }
  if (s.find('/', slash + 1) != absl::string_view::npos) {
    return "must have at most one '/' (an optional DNS subdomain prefix, then the name)";
  }
  std::string err = Dns1123SubdomainError(s.substr(0, slash));
  if (!err.empty()) return absl::StrCat("prefix part ", err);
  err = NamePartError(s.substr(slash + 1));
  if (!err.empty()) return absl::StrCat("name part ", err);
  return "";
}

// IsValidLabelValue: empty, or a name part.
std::string LabelValueError(absl::string_view s) { return s.empty() ? "" : NamePartError(s); }

namespace {

// A display quantity such as 5Gi, 80Gi, 1.5T: digits, optional fraction, optional suffix.
bool IsDisplayQuantity(absl::string_view s) {
  static constexpr absl::string_view kSuffixes[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k",
                                                    "M",  "G",  "T",  "P",  "E",  ""};
  size_t i = 0;
  while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0) return false;
  if (i < s.size() && s[i] == '.') {
    size_t frac = ++i;
    while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == frac) return false;
  }
  absl::string_view suffix = s.substr(i);
  return std::find(std::begin(kSuffixes), std::end(kSuffixes), suffix) != std::end(kSuffixes);
}

bool HasControlBytes(absl::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
}

// ---------------------------------------------------------------------------------------
// Validation shared by Parse and FromOfferings. Field names are the YAML field names, so a
// message means the same thing whichever way the offering was built.

// Returns a location suffix such as " (line 7, column 5)" for an offering's field, or "".
using Locator = std::function<std::string(size_t index, const std::string& field)>;

std::string NoLocation(size_t, const std::string&) { return ""; }

class OfferingValidator {
 public:
  OfferingValidator(const Offering& o, size_t index, const Locator& where)
      : o_(o), index_(index), where_(where) {}

  absl::Status Error(const std::string& field, absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat(OfferingLabel(index_, o_.resource), ": ", field,
                                                   ": ", msg, where_(index_, field)));
  }

  absl::Status Validate() const {
    if (o_.resource.empty()) return Error("resource", "must be set");
    if (std::string err = ExtendedResourceNameError(o_.resource); !err.empty()) {
      return Error("resource", err);
    }
    if (o_.aliases.size() > kMaxAliases) {
      return Error("aliases", absl::StrCat("must list at most ", kMaxAliases, " names, got ",
                                           o_.aliases.size()));
    }
    for (size_t i = 0; i < o_.aliases.size(); ++i) {
      const std::string field = absl::StrCat("aliases[", i, "]");
      const std::string& alias = o_.aliases[i];
      if (alias.empty()) return Error(field, "must not be empty");
      if (std::string err = ExtendedResourceNameError(alias); !err.empty()) {
        return Error(field, absl::StrCat(Quote(alias), " ", err));
      }
      if (alias == o_.resource) {
        return Error(field, absl::StrCat(Quote(alias), " is the offering's own resource name"));
      }
      for (size_t j = 0; j < i; ++j) {
        if (o_.aliases[j] == alias) {
          return Error(field,
                       absl::StrCat(Quote(alias), " is listed twice (also aliases[", j, "])"));
        }
      }
    }
    if (o_.unit != UnitKind::kGpu && o_.unit != UnitKind::kMig) {
      return Error("unit", absl::StrCat("unknown unit kind ", static_cast<int>(o_.unit)));
    }
    if (o_.sharing != Sharing::kExclusive && o_.sharing != Sharing::kTimeSliced &&
        o_.sharing != Sharing::kMps) {
      return Error("sharing", absl::StrCat("unknown sharing ", static_cast<int>(o_.sharing)));
    }
    if (o_.replicas < 1) {
      return Error("replicas", absl::StrCat("must be at least 1, got ", o_.replicas));
    }
    if (o_.replicas > kMaxReplicas) {
      return Error("replicas",
                   absl::StrCat("must be at most ", kMaxReplicas, ", got ", o_.replicas));
    }
    if (o_.sharing == Sharing::kExclusive && o_.replicas != 1) {
      return Error("replicas",
                   absl::StrCat("must be 1 for sharing \"exclusive\", got ", o_.replicas));
    }
    if (o_.unit == UnitKind::kMig) {
      if (o_.mig_profile.empty()) return Error("migProfile", "must be set for unit \"mig\"");
      if (!IsValidMigProfile(o_.mig_profile)) {
        return Error("migProfile",
                     absl::StrCat(Quote(o_.mig_profile),
                                  " is not a MIG profile (want <n>g.<m>gb with n 1..8, m 1..999 "
                                  "and an optional +attribute, e.g. 1g.5gb or 1g.10gb+me)"));
      }
    } else if (!o_.mig_profile.empty()) {
      return Error("migProfile",
                   absl::StrCat("must not be set for unit \"gpu\" (a whole GPU has no MIG "
                                "profile; use unit: mig), got ",
                                Quote(o_.mig_profile)));
    }
    if (std::string err = LabelValueError(o_.product); !err.empty()) {
      return Error("product",
                   absl::StrCat(Quote(o_.product), " cannot prefix a node label value: ", err));
    }
    if (!o_.memory.empty() &&
        (o_.memory.size() > kMaxMemoryBytes || !IsDisplayQuantity(o_.memory))) {
      return Error("memory",
                   absl::StrCat("must be a quantity such as 5Gi or 80Gi, got ", Quote(o_.memory)));
    }
    if (!o_.device_class.empty()) {
      if (std::string err = Dns1123SubdomainError(o_.device_class); !err.empty()) {
        return Error("deviceClass", absl::StrCat(Quote(o_.device_class), " ", err));
      }
    }
    if (o_.display_name.size() > kMaxDisplayNameBytes) {
      return Error("displayName", absl::StrCat("must be at most ", kMaxDisplayNameBytes,
                                               " bytes, got ", o_.display_name.size()));
    }
    if (HasControlBytes(o_.display_name)) {
      return Error("displayName", absl::StrCat("must not contain control characters, got ",
                                               Quote(o_.display_name)));
    }
    if (!absl::StartsWith(o_.quota_key, kQuotaPrefix)) {
      return Error("quotaKey", absl::StrCat("must start with \"requests.\" (a ResourceQuota "
                                            "spec.hard key), got ",
                                            Quote(o_.quota_key)));
    }
    if (std::string err =
            ExtendedResourceNameError(absl::string_view(o_.quota_key).substr(kQuotaPrefix.size()));
        !err.empty()) {
      return Error("quotaKey",
                   absl::StrCat(Quote(o_.quota_key), ": the part after \"requests.\" ", err));
    }
    if (o_.node_selector.size() > kMaxSelectorEntries) {
      return Error("nodeSelector", absl::StrCat("must have at most ", kMaxSelectorEntries,
                                                " entries, got ", o_.node_selector.size()));
    }
    for (const auto& [key, value] : o_.node_selector) {
      if (std::string err = QualifiedNameError(key); !err.empty()) {
        return Error("nodeSelector", absl::StrCat("label key ", Quote(key), " ", err));
      }
      if (std::string err = LabelValueError(value); !err.empty()) {
        return Error("nodeSelector",
                     absl::StrCat("label value ", Quote(value), " of ", Quote(key), " ", err));
      }
    }
    if (o_.mps_single_project && o_.sharing != Sharing::kMps) {
      return Error("mpsSingleProject",
                   absl::StrCat("applies only to sharing \"mps\" (time-sliced units are always "
                                "single-project), but sharing is \"",
                                SharingName(o_.sharing), "\""));
    }
    return absl::OkStatus();
  }

 private:
  const Offering& o_;
  size_t index_;
  const Locator& where_;
};

// Validates every offering, assigns ids and defaults, and indexes names and aliases.
absl::Status ValidateAll(std::vector<Offering>* offerings, const Locator& where,
                         absl::flat_hash_map<std::string, OfferingId>* by_name) {
  if (offerings->empty()) {
    return absl::InvalidArgumentError("offerings: must list at least one offering");
  }
  if (offerings->size() > kMaxOfferings) {
    return absl::InvalidArgumentError(absl::StrCat("offerings: must list at most ", kMaxOfferings,
                                                   " offerings, got ", offerings->size()));
  }
  by_name->clear();
  for (size_t i = 0; i < offerings->size(); ++i) {
    Offering& o = (*offerings)[i];
    o.id = static_cast<OfferingId>(i);
    if (o.quota_key.empty() && !o.resource.empty()) {
      o.quota_key = absl::StrCat(kQuotaPrefix, o.resource);
    }
    OfferingValidator v(o, i, where);
    if (absl::Status s = v.Validate(); !s.ok()) return s;

    auto claim = [&](const std::string& name, const std::string& field) -> absl::Status {
      auto [it, inserted] = by_name->emplace(name, o.id);
      if (inserted) return absl::OkStatus();
      const Offering& other = (*offerings)[static_cast<size_t>(it->second)];
      return v.Error(field,
                     absl::StrCat(Quote(name), " is already used by ",
                                  OfferingLabel(static_cast<size_t>(other.id), other.resource),
                                  other.resource == name ? " as its resource" : " as an alias"));
    };
    if (absl::Status s = claim(o.resource, "resource"); !s.ok()) return s;
    for (size_t a = 0; a < o.aliases.size(); ++a) {
      if (absl::Status s = claim(o.aliases[a], absl::StrCat("aliases[", a, "]")); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Lexical pre-scan: bounds nesting depth and token count before yaml-cpp builds anything.
//
// The count is conservative (it may over-estimate, never matters for real catalogs):
//   * every open flow collection ('[' or '{' where a node may start) is one level;
//   * every distinct column of the block indentation stack (line indents and the columns
//     after compact "- ", "? ", ": " indicators) counts as two levels, because a block
//     mapping and its block-sequence value may share a column;
//   * quoted scalars, block scalars (| and >) and comments are skipped.
// If the estimate were ever too low, yaml-cpp's own depth guard (2,000) is the backstop.
class DocumentScanner {
 public:
  absl::Status Scan(absl::string_view text) {
    size_t pos = 0;
    int line_no = 0;
    while (pos < text.size()) {
      size_t eol = text.find('\n', pos);
      if (eol == absl::string_view::npos) eol = text.size();
      absl::string_view line = text.substr(pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (absl::Status s = ScanLine(line, line_no); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status TooDeep(int line_no) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("document nests deeper than %d levels at line %d (a catalog needs about 5)",
                        kMaxDepth, line_no));
  }
  size_t Depth() const { return 2 * block_.size() + flow_; }
  absl::Status PushBlock(size_t column, int line_no) {
    block_.push_back(column);
    return Depth() > kMaxDepth ? TooDeep(line_no) : absl::OkStatus();
  }
  absl::Status CountToken(int line_no) {
    if (++tokens_ <= kMaxTokens) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "document has more than %d YAML tokens at line %d (a catalog of %d offerings needs "
        "about 50000)",
        kMaxTokens, line_no, kMaxOfferings));
  }
  static bool IsSpace(char c) { return c == ' ' || c == '\t'; }

  absl::Status ScanLine(absl::string_view line, int line_no) {
    size_t indent = 0;
    while (indent < line.size() && line[indent] == ' ') ++indent;
    size_t first = indent;
    while (first < line.size() && IsSpace(line[first])) ++first;
    const bool blank = first == line.size();

    if (in_block_scalar_) {
      if (blank || indent > block_scalar_indent_) return absl::OkStatus();
      in_block_scalar_ = false;
    }

    size_t i = 0;
    if (quote_ == 0 && flow_ == 0) {
      // Block context: the line's indentation decides which block levels are still open.
      if (blank || line[first] == '#') return absl::OkStatus();
      if (indent == 0 && line[0] == '%') return absl::OkStatus();  // directive
      bool marker = indent == 0 &&
                    (absl::StartsWith(line, "---") || absl::StartsWith(line, "...")) &&
                    (line.size() == 3 || IsSpace(line[3]));
      if (marker) {
        block_.clear();
        i = 3;
      } else {
        while (!block_.empty() && block_.back() > indent) block_.pop_back();
        if (block_.empty() || block_.back() < indent) {
          if (absl::Status s = PushBlock(indent, line_no); !s.ok()) return s;
        }
        i = indent;
        // Compact nested collections on one line: "- - - x", "- key: v", "? x".
        while (i < line.size() && (line[i] == '-' || line[i] == '?' || line[i] == ':') &&
               (i + 1 == line.size() || IsSpace(line[i + 1]))) {
          if (absl::Status s = CountToken(line_no); !s.ok()) return s;
          ++i;
          while (i < line.size() && IsSpace(line[i])) ++i;
          if (i < line.size() && line[i] != '#' && block_.back() < i) {
            if (absl::Status s = PushBlock(i, line_no); !s.ok()) return s;
          }
        }
      }
      node_start_ = true;
    }

    bool plain = false;  // inside a run of plain-scalar characters
    for (; i < line.size(); ++i) {
      const char c = line[i];
      if (quote_ == '\'') {
        if (c == '\'') {
          if (i + 1 < line.size() && line[i + 1] == '\'') {
            ++i;  // '' is an escaped quote
          } else {
            quote_ = 0;
          }
        }
        continue;
      }
      if (quote_ == '"') {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          quote_ = 0;
        }
        continue;
      }
      if (IsSpace(c)) {
        plain = false;
        continue;
      }
      if (c == '#' && (i == 0 || IsSpace(line[i - 1]))) break;  // comment
      const bool in_flow = flow_ > 0;
      if ((c == '[' || c == '{') && (in_flow || node_start_)) {
        ++flow_;
        if (Depth() > kMaxDepth) return TooDeep(line_no);
        if (absl::Status s = CountToken(line_no); !s.ok()) return s;
        node_start_ = true;
        plain = false;
        continue;
      }
      if (in_flow && (c == ']' || c == '}')) {
        --flow_;
        node_start_ = false;
        plain = false;
        continue;
      }
      if (in_flow && c == ',') {
        if (absl::Status s = CountToken(line_no); !s.ok()) return s;
        node_start_ = true;
        plain = false;
        continue;
      }
      if ((c == '\'' || c == '"') && node_start_) {
        if (absl::Status s = CountToken(line_no); !s.ok()) return s;
        quote_ = c;
        node_start_ = false;
        continue;
      }
      if (c == ':') {
        const bool next_ends = i + 1 == line.size() || IsSpace(line[i + 1]);
        // In flow context "key":value (JSON) needs no space after ':' when the key was
        // quoted or a collection; inside a plain scalar (http://x) ':' is just a character.
        if (next_ends || (in_flow && !plain)) {
          if (absl::Status s = CountToken(line_no); !s.ok()) return s;
          node_start_ = true;
          plain = false;
          continue;
        }
      }
      if (!in_flow && node_start_ && (c == '|' || c == '>')) {
        if (absl::Status s = CountToken(line_no); !s.ok()) return s;
        in_block_scalar_ = true;
        block_scalar_indent_ = indent;
        return absl::OkStatus();
      }
      if ((c == '&' || c == '!') && node_start_) {  // anchor or tag: the node comes after it
        while (i + 1 < line.size() && !IsSpace(line[i + 1])) ++i;
        continue;
      }
      if (!plain) {
        if (absl::Status s = CountToken(line_no); !s.ok()) return s;
        plain = true;
      }
      node_start_ = false;
    }
    return absl::OkStatus();
  }

  std::vector<size_t> block_;  // columns of the open block levels
  size_t flow_ = 0;            // open flow collections
  char quote_ = 0;             // inside a quoted scalar that spans lines
  bool node_start_ = true;     // the next non-space character may begin a node
  bool in_block_scalar_ = false;
  size_t block_scalar_indent_ = 0;
  size_t tokens_ = 0;
};

// ---------------------------------------------------------------------------------------
// YAML tree -> offerings. Type errors are reported here with the node's line and column;
// value rules are checked afterwards by OfferingValidator (shared with FromOfferings).

std::string At(const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return "";
  return absl::StrFormat(" (line %d, column %d)", mark.line + 1, mark.column + 1);
}

std::string KindName(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return n.Tag() == "!" ? absl::StrCat("the string ", Quote(n.Scalar()))
                            : Printable(n.Scalar());
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// Levenshtein distance, for "did you mean" on unknown fields (inputs are short field names).
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (absl::ascii_tolower(static_cast<unsigned char>(a[i - 1])) ==
                                          absl::ascii_tolower(static_cast<unsigned char>(b[j - 1]))
                                      ? 0
                                      : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string UnknownFieldMessage(absl::string_view key,
                                const std::vector<absl::string_view>& known) {
  std::string msg = absl::StrCat("unknown field ", Quote(key));
  if (key.size() <= 64) {
    for (absl::string_view k : known) {
      if (EditDistance(key, k) <= 2) return absl::StrCat(msg, " (did you mean \"", k, "\"?)");
    }
  }
  return absl::StrCat(msg, " (known fields: ", absl::StrJoin(known, ", "), ")");
}

// The entries of a mapping node, keyed by field name, rejecting unknown and repeated fields.
// `fail(field_or_empty, message, mark)` builds the error in the caller's context.
using FailFn = std::function<absl::Status(const std::string& field, absl::string_view msg,
                                          const YAML::Mark& mark)>;

absl::Status ReadFields(const YAML::Node& map, const std::vector<absl::string_view>& known,
                        const FailFn& fail,
                        std::vector<std::pair<std::string, YAML::Node>>* fields) {
  // Copies, not references: yaml-cpp's iterators hand out temporaries.
  for (const auto& entry : map) {
    const YAML::Node key = entry.first;
    if (!key.IsScalar()) {
      return fail("", absl::StrCat("field names must be strings, got ", KindName(key)), key.Mark());
    }
    const std::string& name = key.Scalar();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return fail("", UnknownFieldMessage(name, known), key.Mark());
    }
    for (const auto& [seen, unused] : *fields) {
      if (seen == name) return fail(name, "is given twice", key.Mark());
    }
    fields->emplace_back(name, entry.second);
  }
  return absl::OkStatus();
}

// String value: any scalar (plain or quoted); null means "not set".
absl::Status ReadString(const YAML::Node& n, size_t max_bytes, const std::string& field,
                        const FailFn& fail, std::string* out) {
  if (n.IsNull()) {
    out->clear();
    return absl::OkStatus();
  }
  if (!n.IsScalar())
    return fail(field, absl::StrCat("must be a string, got ", KindName(n)), n.Mark());
  const std::string& s = n.Scalar();
  if (s.size() > max_bytes) {
    return fail(field, absl::StrCat("must be at most ", max_bytes, " bytes, got ", s.size()),
                n.Mark());
  }
  *out = s;
  return absl::OkStatus();
}

// Integer value: a plain (unquoted) decimal integer. Out-of-int32 values are reported with
// the text as written so that 99999999999999999999 is not silently wrapped.
absl::Status ReadInt32(const YAML::Node& n, int64_t min, int64_t max, const std::string& field,
                       const FailFn& fail, int32_t* out) {
  if (!n.IsScalar() || n.Tag() == "!") {
    return fail(field, absl::StrCat("must be an integer, got ", KindName(n)), n.Mark());
  }
  const std::string& s = n.Scalar();
  size_t digits_from = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  bool is_integer =
      s.size() > digits_from && std::all_of(s.begin() + static_cast<std::ptrdiff_t>(digits_from),
                                            s.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!is_integer) {
    return fail(field, absl::StrCat("must be an integer, got ", KindName(n)), n.Mark());
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v < std::numeric_limits<int32_t>::min() ||
      v > std::numeric_limits<int32_t>::max()) {
    const bool negative = s[0] == '-';
    return fail(field,
                absl::StrCat("must be ", negative ? "at least " : "at most ", negative ? min : max,
                             ", got ", Printable(s)),
                n.Mark());
  }
  *out = static_cast<int32_t>(v);
  return absl::OkStatus();
}

// Boolean value: plain true/false (YAML 1.2 core schema; yes/no/on/off are rejected).
absl::Status ReadBool(const YAML::Node& n, const std::string& field, const FailFn& fail,
                      bool* out) {
  if (n.IsScalar() && n.Tag() != "!") {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") {
      *out = true;
      return absl::OkStatus();
    }
    if (s == "false" || s == "False" || s == "FALSE") {
      *out = false;
      return absl::OkStatus();
    }
  }
  return fail(field, absl::StrCat("must be true or false, got ", KindName(n)), n.Mark());
}

class YamlReader {
 public:
  // Location of an offering's field for validation messages (field mark, else the entry's).
  std::string Where(size_t index, const std::string& field) const {
    if (index >= offering_marks_.size()) return "";
    auto it = field_marks_[index].find(field);
    return At(it != field_marks_[index].end() ? it->second : offering_marks_[index]);
  }

  absl::Status Read(const YAML::Node& root, std::vector<Offering>* out) {
    FailFn top = [](const std::string& field, absl::string_view msg, const YAML::Mark& mark) {
      return absl::InvalidArgumentError(
          absl::StrCat(field.empty() ? "" : absl::StrCat(field, ": "), msg, At(mark)));
    };
    if (!root.IsMap()) {
      return top("",
                 absl::StrCat("document must be a mapping with apiVersion, kind and "
                              "offerings, got ",
                              KindName(root)),
                 root.Mark());
    }
    std::vector<std::pair<std::string, YAML::Node>> fields;
    if (absl::Status s = ReadFields(root, {"apiVersion", "kind", "offerings"}, top, &fields);
        !s.ok()) {
      return s;
    }
    std::string api_version, kind;
    YAML::Node offerings;
    for (const auto& [name, value] : fields) {
      absl::Status s;
      if (name == "apiVersion") {
        s = ReadString(value, kMaxScalarBytes, name, top, &api_version);
        if (s.ok() && api_version != kApiVersion) {
          s = top(name, absl::StrCat("must be \"", kApiVersion, "\", got ", Quote(api_version)),
                  value.Mark());
        }
      } else if (name == "kind") {
        s = ReadString(value, kMaxScalarBytes, name, top, &kind);
        if (s.ok() && kind != kKind) {
          s = top(name, absl::StrCat("must be \"", kKind, "\", got ", Quote(kind)), value.Mark());
        }
      } else {
        offerings = value;
      }
      if (!s.ok()) return s;
    }
    if (api_version.empty()) {
      return top("apiVersion", absl::StrCat("must be set to \"", kApiVersion, "\""), root.Mark());
    }
    if (kind.empty())
      return top("kind", absl::StrCat("must be set to \"", kKind, "\""), root.Mark());
    if (!offerings.IsDefined() || offerings.IsNull()) {
      return top("offerings", "must be set and list at least one offering", root.Mark());
    }
    if (!offerings.IsSequence()) {
      return top("offerings",
                 absl::StrCat("must be a list of offerings, got ", KindName(offerings)),
                 offerings.Mark());
    }
    if (offerings.size() == 0) {
      return top("offerings", "must list at least one offering", offerings.Mark());
    }
    if (offerings.size() > kMaxOfferings) {
      return top(
          "offerings",
          absl::StrCat("must list at most ", kMaxOfferings, " offerings, got ", offerings.size()),
          offerings.Mark());
    }
    out->clear();
    out->reserve(offerings.size());
    for (size_t i = 0; i < offerings.size(); ++i) {
      out->emplace_back();
      offering_marks_.push_back(offerings[i].Mark());
      field_marks_.emplace_back();
      if (absl::Status s = ReadOffering(offerings[i], i, &out->back()); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status ReadOffering(const YAML::Node& node, size_t index, Offering* o) {
    // The label needs the resource, so errors refer to it once it has been read.
    FailFn fail = [index, o](const std::string& field, absl::string_view msg,
                             const YAML::Mark& mark) {
      return absl::InvalidArgumentError(absl::StrCat(OfferingLabel(index, o->resource), ": ",
                                                     field.empty() ? "" : absl::StrCat(field, ": "),
                                                     msg, At(mark)));
    };
    if (!node.IsMap()) {
      return fail(
          "",
          absl::StrCat("must be a mapping with at least a resource field, got ", KindName(node)),
          node.Mark());
    }
    // Resource first, so that every other message names the offering.
    for (const auto& entry : node) {
      const YAML::Node key = entry.first;
      if (key.IsScalar() && key.Scalar() == "resource") {
        std::string resource;
        const YAML::Node value = entry.second;
        if (ReadString(value, kMaxScalarBytes, "resource", fail, &resource).ok()) {
          o->resource = std::move(resource);
        }
        break;
      }
    }
    static const std::vector<absl::string_view> kFields = {
        "resource",        "aliases", "unit",        "sharing",     "replicas", "product",
        "migProfile",      "memory",  "deviceClass", "displayName", "quotaKey", "nodeSelector",
        "mpsSingleProject"};
    std::vector<std::pair<std::string, YAML::Node>> fields;
    if (absl::Status s = ReadFields(node, kFields, fail, &fields); !s.ok()) return s;
    auto& marks = field_marks_[index];
    for (const auto& [name, value] : fields) {
      marks[name] = value.Mark();
      absl::Status s;
      if (name == "resource") {
        s = ReadString(value, kMaxScalarBytes, name, fail, &o->resource);
      } else if (name == "aliases") {
        s = ReadAliases(value, fail, &marks, &o->aliases);
      } else if (name == "unit") {
        std::string unit;
        s = ReadString(value, kMaxScalarBytes, name, fail, &unit);
        if (s.ok() && unit == "mig") {
          o->unit = UnitKind::kMig;
        } else if (s.ok() && unit == "gpu") {
          o->unit = UnitKind::kGpu;
        } else if (s.ok()) {
          s = fail(name, absl::StrCat("must be \"gpu\" or \"mig\", got ", Quote(unit)),
                   value.Mark());
        }
      } else if (name == "sharing") {
        std::string sharing;
        s = ReadString(value, kMaxScalarBytes, name, fail, &sharing);
        if (s.ok() && sharing == "exclusive") {
          o->sharing = Sharing::kExclusive;
        } else if (s.ok() && sharing == "time-sliced") {
          o->sharing = Sharing::kTimeSliced;
        } else if (s.ok() && sharing == "mps") {
          o->sharing = Sharing::kMps;
        } else if (s.ok()) {
          s = fail(name,
                   absl::StrCat("must be \"exclusive\", \"time-sliced\" or \"mps\", got ",
                                Quote(sharing)),
                   value.Mark());
        }
      } else if (name == "replicas") {
        s = value.IsNull() ? absl::OkStatus()
                           : ReadInt32(value, 1, kMaxReplicas, name, fail, &o->replicas);
      } else if (name == "product") {
        s = ReadString(value, kMaxScalarBytes, name, fail, &o->product);
      } else if (name == "migProfile") {
        s = ReadString(value, kMaxScalarBytes, name, fail, &o->mig_profile);
      } else if (name == "memory") {
        s = ReadString(value, kMaxScalarBytes, name, fail, &o->memory);
      } else if (name == "deviceClass") {
        s = ReadString(value, kMaxScalarBytes, name, fail, &o->device_class);
      } else if (name == "displayName") {
        s = ReadString(value, kMaxScalarBytes, name, fail, &o->display_name);
      } else if (name == "quotaKey") {
        s = ReadString(value, kMaxScalarBytes, name, fail, &o->quota_key);
      } else if (name == "nodeSelector") {
        s = ReadSelector(value, fail, &o->node_selector);
      } else if (name == "mpsSingleProject") {
        s = value.IsNull() ? absl::OkStatus() : ReadBool(value, name, fail, &o->mps_single_project);
      }
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  static absl::Status ReadAliases(const YAML::Node& n, const FailFn& fail,
                                  absl::flat_hash_map<std::string, YAML::Mark>* marks,
                                  std::vector<std::string>* out) {
    out->clear();
    if (n.IsNull()) return absl::OkStatus();
    if (!n.IsSequence()) {
      return fail("aliases", absl::StrCat("must be a list of resource names, got ", KindName(n)),
                  n.Mark());
    }
    if (n.size() > kMaxAliases) {
      return fail("aliases",
                  absl::StrCat("must list at most ", kMaxAliases, " names, got ", n.size()),
                  n.Mark());
    }
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string field = absl::StrCat("aliases[", i, "]");
      const YAML::Node item = n[i];
      (*marks)[field] = item.Mark();
      if (!item.IsScalar()) {
        return fail(field, absl::StrCat("must be a resource name, got ", KindName(item)),
                    item.Mark());
      }
      std::string alias;
      if (absl::Status s = ReadString(item, kMaxScalarBytes, field, fail, &alias); !s.ok()) {
        return s;
      }
      out->push_back(std::move(alias));
    }
    return absl::OkStatus();
  }

  static absl::Status ReadSelector(const YAML::Node& n, const FailFn& fail,
                                   std::map<std::string, std::string>* out) {
    out->clear();
    if (n.IsNull()) return absl::OkStatus();
    if (!n.IsMap()) {
      return fail("nodeSelector",
                  absl::StrCat("must be a mapping of node labels, got ", KindName(n)), n.Mark());
    }
    if (n.size() > kMaxSelectorEntries) {
      return fail(
          "nodeSelector",
          absl::StrCat("must have at most ", kMaxSelectorEntries, " entries, got ", n.size()),
          n.Mark());
    }
    for (const auto& entry : n) {
      const YAML::Node key_node = entry.first;
      const YAML::Node value_node = entry.second;
      std::string key, value;
      if (!key_node.IsScalar()) {
        return fail("nodeSelector",
                    absl::StrCat("label keys must be strings, got ", KindName(key_node)),
                    key_node.Mark());
      }
      if (absl::Status s = ReadString(key_node, kMaxScalarBytes, "nodeSelector", fail, &key);
          !s.ok()) {
        return s;
      }
      if (!value_node.IsNull() && !value_node.IsScalar()) {
        return fail(
            "nodeSelector",
            absl::StrCat("value of ", Quote(key), " must be a string, got ", KindName(value_node)),
            value_node.Mark());
      }
      if (absl::Status s = ReadString(value_node, kMaxScalarBytes, "nodeSelector", fail, &value);
          !s.ok()) {
        return s;
      }
      if (!out->emplace(key, value).second) {
        return fail("nodeSelector", absl::StrCat("label key ", Quote(key), " is given twice"),
                    key_node.Mark());
      }
    }
    return absl::OkStatus();
  }

  std::vector<YAML::Mark> offering_marks_;
  std::vector<absl::flat_hash_map<std::string, YAML::Mark>> field_marks_;
};

absl::Status CheckBytes(absl::string_view text) {
  if (text.size() > kMaxDocumentBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("document is %d bytes; a catalog may be at most 4 MiB (%d bytes)",
                        text.size(), kMaxDocumentBytes));
  }
  const TextFault fault = FindTextFault(text);
  if (fault.kind == TextFault::kNone) return absl::OkStatus();
  std::string what = "invalid UTF-8";
  if (fault.kind == TextFault::kNul) what = "a NUL byte";
  if (fault.kind == TextFault::kControl) {
    what = absl::StrFormat("the control character U+%04X", fault.byte);
  }
  const absl::string_view before = text.substr(0, fault.offset);
  const size_t line = static_cast<size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
  const size_t last_nl = before.rfind('\n');
  const size_t column =
      last_nl == absl::string_view::npos ? fault.offset + 1 : fault.offset - last_nl;
  return absl::InvalidArgumentError(
      absl::StrFormat("document contains %s at line %d, column %d (byte offset %d; a catalog "
                      "is UTF-8 text)",
                      what, line, column, fault.offset));
}

// A document that opens like JSON is held to JSON's rules (json_reader.h), which YAML's
// reading of it would not check: no trailing garbage, no single quotes or trailing commas.
absl::Status CheckJsonDocument(absl::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == absl::string_view::npos || text[first] != '{') return absl::OkStatus();
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonLimited(text, doc); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("JSON catalog: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view UnitKindName(UnitKind kind) {
  switch (kind) {
    case UnitKind::kGpu:
      return "gpu";
    case UnitKind::kMig:
      return "mig";
  }
  return "unknown";
}

absl::string_view SharingName(Sharing sharing) {
  switch (sharing) {
    case Sharing::kExclusive:
      return "exclusive";
    case Sharing::kTimeSliced:
      return "time-sliced";
    case Sharing::kMps:
      return "mps";
  }
  return "unknown";
}

std::string ExtendedResourceNameError(absl::string_view name) {
  if (name.empty()) return "must not be empty";
  const size_t slash = name.find('/');
  if (slash == absl::string_view::npos) {
    return "must have a domain prefix, e.g. \"example.com/gpu\" (names without one are native "
           "Kubernetes resources)";
  }
  if (absl::StartsWith(name, kQuotaPrefix)) {
    return "must not start with \"requests.\" (that prefix is reserved for quota keys)";
  }
  // Kubernetes treats any name containing "kubernetes.io/" as native (IsPrefixedNativeResource).
  if (absl::StrContains(name, "kubernetes.io/")) {
    return "must not be in the kubernetes.io domain (reserved for native resources)";
  }
  if (name.find('/', slash + 1) != absl::string_view::npos) {
    return "must contain exactly one '/', between domain and name";
  }
  absl::string_view domain = name.substr(0, slash);
  absl::string_view part = name.substr(slash + 1);
  if (domain.empty()) return "domain prefix must not be empty";
  if (std::string err = Dns1123SubdomainError(domain); !err.empty()) {
    return absl::StrCat("domain prefix ", err);
  }
  // The quota key requests.<name> must itself be a qualified name: its prefix part
  // "requests.<domain>" is limited to 253 characters.
  if (kQuotaPrefix.size() + domain.size() > 253) {
    return absl::StrCat("domain prefix must be at most ", 253 - kQuotaPrefix.size(),
                        " characters (\"requests.<domain>\" is limited to 253), got ",
                        domain.size());
  }
  if (std::string err = NamePartError(part); !err.empty()) return absl::StrCat("name part ", err);
  return "";
}

bool IsValidMigProfile(absl::string_view profile) {
  // <n>g.<m>gb with n in 1..8 and m in 1..999 (no leading zeros), then (\+[a-z][a-z.]*)?.
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0;
  if (i >= profile.size() || profile[i] < '1' || profile[i] > '8') return false;
  ++i;
  if (!absl::StartsWith(profile.substr(i), "g.")) return false;
  i += 2;
  size_t m_start = i;
  while (i < profile.size() && digit(profile[i])) ++i;
  size_t m_len = i - m_start;
  if (m_len < 1 || m_len > 3 || profile[m_start] == '0') return false;
  if (!absl::StartsWith(profile.substr(i), "gb")) return false;
  i += 2;
  if (i == profile.size()) return true;
  if (profile[i] != '+') return false;
  ++i;
  if (i >= profile.size() || profile[i] < 'a' || profile[i] > 'z') return false;
  for (++i; i < profile.size(); ++i) {
    if (!((profile[i] >= 'a' && profile[i] <= 'z') || profile[i] == '.')) return false;
  }
  return true;
}

absl::StatusOr<Catalog> Catalog::Parse(absl::string_view text) {
  if (absl::Status s = CheckBytes(text); !s.ok()) return s;
  if (absl::Status s = DocumentScanner().Scan(text); !s.ok()) return s;
  if (absl::Status s = CheckJsonDocument(text); !s.ok()) return s;

  absl::StatusOr<YAML::Node> doc = LoadOneYamlDocument(text, "a catalog");
  if (!doc.ok()) return doc.status();
  if (!doc->IsDefined() || doc->IsNull()) {
    return absl::InvalidArgumentError(
        "empty document: a catalog needs apiVersion, kind and offerings");
  }

  YamlReader reader;
  std::vector<Offering> offerings;
  try {
    if (absl::Status s = reader.Read(*doc, &offerings); !s.ok()) return s;
  } catch (const YAML::Exception& e) {
    return YamlSyntaxError(e.mark, e.msg);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read catalog: ", e.what()));
  } catch (...) {
    return absl::InvalidArgumentError("cannot read catalog: unknown error");
  }

  Catalog catalog;
  Locator where = [&reader](size_t index, const std::string& field) {
    return reader.Where(index, field);
  };
  if (absl::Status s = ValidateAll(&offerings, where, &catalog.by_name_); !s.ok()) return s;
  catalog.offerings_ = std::move(offerings);
  return catalog;
}

absl::StatusOr<Catalog> Catalog::LoadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    int err = errno;
    std::string msg = absl::StrCat("cannot open catalog file \"", path, "\": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  // Read at most one byte past the limit so that a huge file is rejected without reading it.
  std::string text;
  char buf[65536];
  bool read_error = false;
  while (text.size() <= kMaxDocumentBytes) {
    size_t n = std::fread(buf, 1, sizeof(buf), f);
    text.append(buf, n);
    if (n < sizeof(buf)) {
      read_error = std::ferror(f) != 0;
      break;
    }
  }
  int err = errno;
  std::fclose(f);
  if (read_error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read catalog file \"", path, "\": ", std::strerror(err)));
  }
  absl::StatusOr<Catalog> catalog = Parse(text);
  if (!catalog.ok()) {
    return absl::Status(catalog.status().code(),
                        absl::StrCat("catalog file \"", path, "\": ", catalog.status().message()));
  }
  return catalog;
}

absl::StatusOr<Catalog> Catalog::FromOfferings(std::vector<Offering> offerings) {
  Catalog catalog;
  if (absl::Status s = ValidateAll(&offerings, NoLocation, &catalog.by_name_); !s.ok()) return s;
  catalog.offerings_ = std::move(offerings);
  return catalog;
}

const Catalog& Catalog::BuiltIn() {
  // Parsed once, on first use (thread-safe static initialisation); never destroyed, so it
  // stays valid for code running during shutdown.
  static const Catalog* const builtin = [] {
    absl::StatusOr<Catalog> parsed = Parse(BuiltInYaml());
    if (!parsed.ok()) {
      // A broken built-in catalog is a programming error caught by catalog_test.
      std::fprintf(stderr, "gse: the built-in GPU catalog is invalid: %s\n",
                   std::string(parsed.status().message()).c_str());
      std::abort();
    }
    return new Catalog(*std::move(parsed));
  }();
  return *builtin;
}

const Offering* Catalog::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &offerings_[static_cast<size_t>(it->second)];
}

std::vector<std::string> Catalog::AllNames() const {
  // Canonical names first, then aliases, each group sorted (names are unique by validation).
  std::vector<std::string> names, aliases;
  for (const Offering& o : offerings_) {
    names.push_back(o.resource);
    aliases.insert(aliases.end(), o.aliases.begin(), o.aliases.end());
  }
  std::sort(names.begin(), names.end());
  std::sort(aliases.begin(), aliases.end());
  names.insert(names.end(), aliases.begin(), aliases.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace gse
