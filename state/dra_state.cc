// The DRA model (dra_state.h).
#include "state/dra_state.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gse {

// ---------------------------------------------------------------------------------------
// DraSelector: a hand-written parser for the understood subset. Not a CEL implementation:
// anything it does not recognise token for token is refused, so a class it accepts is one
// whose meaning is known exactly.

namespace {

struct Token {
  enum Kind { kIdent, kString, kDot, kLBracket, kRBracket, kLParen, kRParen, kEq, kAnd, kEnd };
  Kind kind;
  std::string text;
};

absl::Status NotUnderstood(absl::string_view why) {
  return absl::UnimplementedError(absl::StrCat("not understood: ", why));
}

absl::StatusOr<std::vector<Token>> Lex(absl::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (absl::ascii_isalpha(c) || c == '_') {
      size_t j = i;
      while (j < s.size() && (absl::ascii_isalnum(s[j]) || s[j] == '_')) ++j;
      out.push_back({Token::kIdent, std::string(s.substr(i, j - i))});
      i = j;
    } else if (c == '\'' || c == '"') {
      const size_t end = s.find(c, i + 1);
      if (end == absl::string_view::npos) return NotUnderstood("unterminated string literal");
      absl::string_view lit = s.substr(i + 1, end - i - 1);
      // CEL escapes (and raw/triple-quoted strings) are outside the subset.
      if (lit.find('\\') != absl::string_view::npos) return NotUnderstood("escape in a string");
      out.push_back({Token::kString, std::string(lit)});
      i = end + 1;
    } else if (c == '.') {
      out.push_back({Token::kDot, "."});
      ++i;
    } else if (c == '[') {
      out.push_back({Token::kLBracket, "["});
      ++i;
    } else if (c == ']') {
      out.push_back({Token::kRBracket, "]"});
      ++i;
    } else if (c == '(') {
      out.push_back({Token::kLParen, "("});
      ++i;
    } else if (c == ')') {
      out.push_back({Token::kRParen, ")"});
      ++i;
    } else if (s.substr(i, 2) == "==") {
      out.push_back({Token::kEq, "=="});
      i += 2;
    } else if (s.substr(i, 2) == "&&") {
      out.push_back({Token::kAnd, "&&"});
      i += 2;
    } else {
      return NotUnderstood(absl::StrCat("operator or character '", absl::CEscape(s.substr(i, 1)),
                                        "' at offset ", i));
    }
  }
  out.push_back({Token::kEnd, ""});
  return out;
}

bool PatternChar(char c) { return absl::ascii_isalnum(c) || c == '_' || c == ' '; }

}  // namespace

absl::StatusOr<DraSelector> DraSelector::Parse(absl::string_view expression) {
  absl::StatusOr<std::vector<Token>> lexed = Lex(expression);
  if (!lexed.ok()) return lexed.status();
  const std::vector<Token>& t = *lexed;
  size_t i = 0;
  auto expect = [&](Token::Kind kind, absl::string_view text = "") {
    if (t[i].kind != kind || (!text.empty() && t[i].text != text)) return false;
    ++i;
    return true;
  };
  DraSelector out;
  while (true) {
    Term term;
    Pattern pattern;
    if (!expect(Token::kIdent, "device") || !expect(Token::kDot)) {
      return NotUnderstood(absl::StrCat("term ", out.terms_.size() + 1,
                                        " does not start with 'device.'"));
    }
    if (expect(Token::kIdent, "driver")) {
      term.kind = Term::kDriverEquals;
      if (!expect(Token::kEq) || t[i].kind != Token::kString) {
        return NotUnderstood("device.driver is not compared with == to a string");
      }
      term.literal = t[i++].text;
    } else if (expect(Token::kIdent, "attributes")) {
      if (!expect(Token::kLBracket) || t[i].kind != Token::kString) {
        return NotUnderstood("device.attributes is not indexed by a domain string");
      }
      term.domain = t[i++].text;
      if (!expect(Token::kRBracket) || !expect(Token::kDot) || t[i].kind != Token::kIdent) {
        return NotUnderstood("device.attributes['...'] is not followed by .<name>");
      }
      term.name = t[i++].text;
      if (expect(Token::kEq)) {
        if (t[i].kind != Token::kString) {
          return NotUnderstood(absl::StrCat(term.name, " is compared to something else than a string"));
        }
        term.kind = Term::kAttributeEquals;
        term.literal = t[i++].text;
      } else if (expect(Token::kDot) && expect(Token::kIdent, "matches") &&
                 expect(Token::kLParen) && t[i].kind == Token::kString) {
        term.kind = Term::kAttributeMatches;
        term.literal = t[i++].text;
        if (!expect(Token::kRParen)) return NotUnderstood("matches( takes one string");
        absl::string_view p = term.literal;
        if (!p.empty() && p[0] == '^') {
          pattern.anchored = true;
          p.remove_prefix(1);
        }
        while (!p.empty()) {
          if (p[0] == '[') {
            const size_t close = p.find(']');
            if (close == absl::string_view::npos || close == 1) {
              return NotUnderstood("bracket class in a matches() pattern");
            }
            Atom atom;
            for (size_t k = 1; k < close; ++k) {
              const char c = p[k];
              // '-' only first or last (a literal), never a range; '.' is literal in a class.
              const bool edge = k == 1 || k + 1 == close;
              if (PatternChar(c) || c == '.' || (c == '-' && edge)) {
                atom.chars.push_back(c);
              } else {
                return NotUnderstood(absl::StrCat("character '", absl::CEscape(std::string(1, c)),
                                                  "' in a bracket class of a matches() pattern"));
              }
            }
            pattern.atoms.push_back(std::move(atom));
            p.remove_prefix(close + 1);
          } else if (PatternChar(p[0]) || p[0] == '-') {
            pattern.atoms.push_back({std::string(1, p[0])});
            p.remove_prefix(1);
          } else {
            return NotUnderstood(absl::StrCat("regular expression operator '",
                                              absl::CEscape(p.substr(0, 1)),
                                              "' in a matches() pattern"));
          }
        }
      } else {
        return NotUnderstood(absl::StrCat("device.attributes['", term.domain, "'].", term.name,
                                          " is used other than by == or matches()"));
      }
    } else {
      return NotUnderstood("only device.driver and device.attributes are understood");
    }
    out.terms_.push_back(std::move(term));
    out.patterns_.push_back(std::move(pattern));
    if (t[i].kind == Token::kEnd) break;
    if (!expect(Token::kAnd)) return NotUnderstood("terms are joined by something else than &&");
  }
  return out;
}

bool DraSelector::PatternMatches(const Pattern& p, absl::string_view text) {
  // RE2 matches() finds the pattern anywhere unless it is anchored with '^'.
  const size_t last_start = text.size() >= p.atoms.size() ? text.size() - p.atoms.size() : 0;
  if (text.size() < p.atoms.size()) return false;
  for (size_t start = 0; start <= (p.anchored ? 0 : last_start); ++start) {
    bool ok = true;
    for (size_t k = 0; k < p.atoms.size() && ok; ++k) {
      ok = p.atoms[k].chars.find(text[start + k]) != std::string::npos;
    }
    if (ok) return true;
  }
  return false;
}

DraSelector::Match DraSelector::Evaluate(absl::string_view driver, const DraDevice& device,
                                         std::string* error) const {
  bool any_error = false;
  std::string first_error;
  for (size_t k = 0; k < terms_.size(); ++k) {
    const Term& term = terms_[k];
    if (term.kind == Term::kDriverEquals) {
      if (driver != term.literal) return Match::kNo;
      continue;
    }
    const DraAttribute* attr = device.Attribute(term.domain, term.name);
    if (attr == nullptr || attr->kind != DraAttribute::kString) {
      if (!any_error) {
        first_error = attr == nullptr
                          ? absl::StrCat("no such key: ", term.name)
                          : absl::StrCat("no matching overload for ", term.name, " (not a string)");
      }
      any_error = true;
      continue;
    }
    const bool ok = term.kind == Term::kAttributeEquals ? attr->text == term.literal
                                                        : PatternMatches(patterns_[k], attr->text);
    if (!ok) return Match::kNo;  // CEL: false && error == false
  }
  if (any_error) {
    if (error != nullptr) *error = first_error;
    return Match::kError;
  }
  return Match::kYes;
}

absl::string_view DraNodeKindName(DraNodeKind kind) {
  switch (kind) {
    case DraNodeKind::kNone: return "none";
    case DraNodeKind::kDevicePlugin: return "device-plugin";
    case DraNodeKind::kDra: return "dra";
  }
  return "none";
}

// ---------------------------------------------------------------------------------------
// DraState: mirror

void DraState::UpsertDeviceClass(DraDeviceClass c) {
  parsed_classes_.insert_or_assign(c.name, ParseClass(c));
  std::string name = c.name;
  classes_.insert_or_assign(std::move(name), std::move(c));
  IndexClasses();
}
bool DraState::RemoveDeviceClass(absl::string_view name) {
  auto it = classes_.find(name);
  if (it == classes_.end()) return false;
  classes_.erase(it);
  if (auto parsed = parsed_classes_.find(name); parsed != parsed_classes_.end()) {
    parsed_classes_.erase(parsed);  // always there (CheckIndexes)
  }
  IndexClasses();
  return true;
}
void DraState::UpsertResourceSlice(DraResourceSlice s) {
  auto it = slices_.find(s.name);
  if (it != slices_.end()) {
    IndexSlice(it->second, false);
    it->second = std::move(s);
  } else {
    std::string name = s.name;
    it = slices_.emplace(std::move(name), std::move(s)).first;
  }
  IndexSlice(it->second, true);
}
bool DraState::RemoveResourceSlice(absl::string_view name) {
  auto it = slices_.find(name);
  if (it == slices_.end()) return false;
  IndexSlice(it->second, false);
  slices_.erase(it);
  return true;
}
void DraState::UpsertResourceClaim(DraResourceClaim c) {
  std::string key = c.Key();
  auto it = claims_.find(key);
  if (it != claims_.end()) {
    IndexClaim(it->first, it->second, false);
    it->second = std::move(c);
  } else {
    it = claims_.emplace(std::move(key), std::move(c)).first;
  }
  IndexClaim(it->first, it->second, true);
}
bool DraState::RemoveResourceClaim(absl::string_view key) {
  auto it = claims_.find(key);
  if (it == claims_.end()) return false;
  IndexClaim(it->first, it->second, false);
  claims_.erase(it);
  return true;
}

// ---------------------------------------------------------------------------------------
// Indexes (dra_state.h says what each holds)

void DraState::IndexSlice(const DraResourceSlice& s, bool add) {
  const Pool pool{s.driver, s.pool_name};
  if (add) {
    pool_slices_[pool].insert(s.name);
  } else if (auto it = pool_slices_.find(pool); it != pool_slices_.end()) {
    it->second.erase(s.name);
    if (it->second.empty()) pool_slices_.erase(it);
  }
  if (ClusterWide(s)) {
    if (add) {
      cluster_slices_.insert(s.name);
    } else {
      cluster_slices_.erase(s.name);
    }
    return;
  }
  if (add) {
    node_slices_[s.node_name].insert(s.name);
    return;
  }
  auto it = node_slices_.find(s.node_name);
  if (it == node_slices_.end()) return;
  it->second.erase(s.name);
  if (it->second.empty()) node_slices_.erase(it);
}

void DraState::IndexClaim(const std::string& key, const DraResourceClaim& c, bool add) {
  if (!c.allocated) return;
  for (const DraAllocationResult& r : c.results) {
    if (r.admin_access) continue;  // holds nothing
    Pool pool{r.driver, r.pool};
    if (add) {
      pool_claims_[std::move(pool)].insert(key);
      continue;
    }
    auto it = pool_claims_.find(pool);
    if (it == pool_claims_.end()) continue;
    it->second.erase(key);
    if (it->second.empty()) pool_claims_.erase(it);
  }
}

namespace {

// A class's parsed selectors as text, to compare a kept parse with one made now.
std::string DescribeSelectors(const absl::Status& status, const std::vector<DraSelector>& selectors) {
  std::string out = status.ok() ? "ok" : std::string(status.message());
  for (const DraSelector& s : selectors) {
    out += " {";
    for (const DraSelector::Term& t : s.terms()) {
      absl::StrAppend(&out, " ", t.kind, ":", t.domain, ":", t.name, ":", t.literal);
    }
    out += " }";
  }
  return out;
}

}  // namespace

std::vector<std::string> DraState::CheckClasses() const {
  std::vector<std::string> out;
  for (const auto& [name, c] : classes_) {
    const ParsedClass now = ParseClass(c);
    const std::string want = DescribeSelectors(now.status, now.selectors);
    const ParsedClass* kept = Parsed(name);
    const std::string have = kept == nullptr ? "missing" : DescribeSelectors(kept->status, kept->selectors);
    if (have != want) {
      out.push_back(absl::StrCat("selectors of DeviceClass ", name, ": kept [", have,
                                 "], parsed now [", want, "]"));
    }
  }
  for (const auto& [name, parsed] : parsed_classes_) {
    if (classes_.count(name) == 0) {
      out.push_back(absl::StrCat("selectors of DeviceClass ", name, ": kept, class not mirrored"));
    }
  }
  // Every name a class publishes and every name indexed: the index's class against a scan.
  std::set<std::string> names;
  for (const auto& [resource, name] : resource_classes_) names.insert(resource);
  for (const auto& [name, c] : classes_) {
    names.insert(c.extended_resource_name);
    names.insert(absl::StrCat(kImplicitExtendedResourcePrefix, name));
  }
  for (const std::string& resource : names) {
    const DraDeviceClass* have = ClassForResource(resource);
    const DraDeviceClass* want = ScanClassForResource(resource);
    if (have != want) {
      out.push_back(absl::StrCat("class of name '", resource, "': indexed '",
                                 have == nullptr ? "" : have->name, "', scan says '",
                                 want == nullptr ? "" : want->name, "'"));
    }
  }
  return out;
}

std::vector<std::string> DraState::CheckIndexes() const {
  DraState recount;
  for (const auto& [name, s] : slices_) recount.IndexSlice(s, true);
  for (const auto& [key, c] : claims_) recount.IndexClaim(key, c, true);
  std::vector<std::string> out;
  auto compare = [&](const auto& have, const auto& want, absl::string_view what,
                     const auto& name_of) {
    for (const auto& [k, v] : want) {
      auto it = have.find(k);
      if (it == have.end() || it->second != v) {
        out.push_back(absl::StrCat(what, " ", name_of(k), ": indexed {",
                                   it == have.end() ? "" : absl::StrJoin(it->second, ","),
                                   "}, objects say {", absl::StrJoin(v, ","), "}"));
      }
    }
    for (const auto& [k, v] : have) {
      if (want.count(k) == 0) {
        out.push_back(absl::StrCat(what, " ", name_of(k), ": indexed {", absl::StrJoin(v, ","),
                                   "}, objects say nothing"));
      }
    }
  };
  compare(node_slices_, recount.node_slices_, "node", [](const std::string& n) { return n; });
  compare(std::map<int, SliceNames>{{0, cluster_slices_}},
          std::map<int, SliceNames>{{0, recount.cluster_slices_}}, "cluster-wide", [](int) {
            return std::string("slices");
          });
  auto pool_name = [](const Pool& p) { return absl::StrCat(p.first, "/", p.second); };
  compare(pool_slices_, recount.pool_slices_, "slices of pool", pool_name);
  compare(pool_claims_, recount.pool_claims_, "claims of pool", pool_name);
  for (std::string& line : CheckClasses()) out.push_back(std::move(line));
  return out;
}

std::vector<std::string> DraState::NodesOfClaim(const DraResourceClaim& c) const {
  std::set<std::string> nodes;
  if (!c.allocated) return {};
  for (const DraAllocationResult& r : c.results) {
    if (r.admin_access) continue;
    auto pool = pool_slices_.find(Pool{r.driver, r.pool});
    if (pool == pool_slices_.end()) continue;
    for (const std::string& name : pool->second) {
      auto s = slices_.find(name);
      if (s == slices_.end()) continue;  // never (CheckIndexes)
      if (ClusterWide(s->second)) return {""};
      nodes.insert(s->second.node_name);
    }
  }
  return {nodes.begin(), nodes.end()};
}

std::vector<const std::pair<const std::string, DraResourceClaim>*> DraState::ClaimsInPools(
    const std::vector<PoolDevice>& walk) const {
  std::set<Pool> pools;
  for (const PoolDevice& pd : walk) pools.insert({pd.slice->driver, pd.slice->pool_name});
  std::set<absl::string_view> keys;
  for (const Pool& pool : pools) {
    auto it = pool_claims_.find(pool);
    if (it == pool_claims_.end()) continue;
    keys.insert(it->second.begin(), it->second.end());
  }
  std::vector<const std::pair<const std::string, DraResourceClaim>*> out;
  out.reserve(keys.size());
  for (absl::string_view key : keys) {
    auto it = claims_.find(key);
    if (it != claims_.end()) out.push_back(&*it);  // always (CheckIndexes)
  }
  return out;
}

const DraDeviceClass* DraState::DeviceClass(absl::string_view name) const {
  auto it = classes_.find(name);
  return it == classes_.end() ? nullptr : &it->second;
}

void DraState::IndexClasses() {
  // The same rule as ScanClassForResource, for every name at once: classes_ iterates by name,
  // so for each name only a strictly newer class replaces the one found first.
  resource_classes_.clear();
  for (const auto& [name, c] : classes_) {
    for (std::string resource :
         {c.extended_resource_name, absl::StrCat(kImplicitExtendedResourcePrefix, name)}) {
      auto [it, inserted] = resource_classes_.try_emplace(std::move(resource), name);
      if (!inserted && c.creation_timestamp > classes_.find(it->second)->second.creation_timestamp) {
        it->second = name;
      }
    }
  }
}

std::vector<const DraDeviceClass*> DraState::DeviceClasses() const {
  std::vector<const DraDeviceClass*> out;
  out.reserve(classes_.size());
  for (const auto& [name, c] : classes_) out.push_back(&c);
  return out;
}

const DraDeviceClass* DraState::ClassForResource(absl::string_view resource) const {
  auto it = resource_classes_.find(resource);
  return it == resource_classes_.end() ? nullptr : DeviceClass(it->second);
}

const DraDeviceClass* DraState::ScanClassForResource(absl::string_view resource) const {
  const DraDeviceClass* best = nullptr;
  for (const auto& [name, c] : classes_) {
    const bool maps = c.extended_resource_name == resource ||
                      absl::StrCat(kImplicitExtendedResourcePrefix, name) == resource;
    if (!maps) continue;
    // Newer creationTimestamp wins (RFC 3339 in UTC, as the API server writes it, orders as
    // text), then the lower name: classes_ iterates by name, so only a newer one replaces.
    if (best == nullptr || c.creation_timestamp > best->creation_timestamp) best = &c;
  }
  return best;
}

DraNodeKind DraState::KindOn(absl::string_view resource,
                             const std::map<std::string, int64_t>& allocatable_milli) const {
  auto it = allocatable_milli.find(std::string(resource));
  if (it != allocatable_milli.end() && it->second > 0) return DraNodeKind::kDevicePlugin;
  return ClassForResource(resource) != nullptr ? DraNodeKind::kDra : DraNodeKind::kNone;
}

DraState::ParsedClass DraState::ParseClass(const DraDeviceClass& c) {
  ParsedClass out;
  if (c.other_selectors > 0) {
    out.status = NotUnderstood(absl::StrCat(c.other_selectors, " selector(s) other than cel"));
    return out;
  }
  for (size_t i = 0; i < c.cel_selectors.size(); ++i) {
    absl::StatusOr<DraSelector> s = DraSelector::Parse(c.cel_selectors[i]);
    if (!s.ok()) {
      out.status = absl::UnimplementedError(
          absl::StrCat("DeviceClass ", c.name, " selector ", i, ": ", s.status().message()));
      out.selectors.clear();
      return out;
    }
    out.selectors.push_back(*std::move(s));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Walk

std::vector<DraState::PoolDevice> DraState::WalkNode(absl::string_view node,
                                                     std::vector<std::string>* problems,
                                                     bool* unmodelled) const {
  // (driver, pool) -> its slices that may serve this node: the node's own and the
  // cluster-wide ones, merged in name order (the order of slices_).
  std::vector<absl::string_view> names;
  auto own = node_slices_.find(node);
  if (own != node_slices_.end()) {
    std::merge(own->second.begin(), own->second.end(), cluster_slices_.begin(),
               cluster_slices_.end(), std::back_inserter(names));
  } else {
    names.assign(cluster_slices_.begin(), cluster_slices_.end());
  }
  std::map<std::pair<std::string, std::string>, std::vector<const DraResourceSlice*>> pools;
  for (absl::string_view name : names) {
    auto found = slices_.find(name);
    if (found == slices_.end()) continue;  // never (CheckIndexes)
    const DraResourceSlice& s = found->second;
    if (s.node_selector || s.per_device_node_selection) {
      // Node selectors need the Node's labels and fields: not modelled, so any walk that
      // might include these devices is not predicted.
      *unmodelled = true;
      problems->push_back(absl::StrCat("slice ", name, ": node selection by selector is not modelled"));
      continue;
    }
    pools[{s.driver, s.pool_name}].push_back(&s);
  }
  std::vector<PoolDevice> out;
  for (auto& [key, slices] : pools) {  // map order: driver, then pool name
    int64_t generation = 0;
    for (const DraResourceSlice* s : slices) generation = std::max(generation, s->pool_generation);
    std::vector<const DraResourceSlice*> current;
    for (const DraResourceSlice* s : slices) {
      if (s->pool_generation == generation) current.push_back(s);
    }
    // `names` is in name order, so `current` is already in metadata.name order.
    const int64_t want = current.front()->resource_slice_count;
    bool valid = true;
    for (const DraResourceSlice* s : current) valid = valid && s->resource_slice_count == want;
    const std::string pool_ref = absl::StrCat("pool ", key.first, "/", key.second);
    if (!valid) {
      problems->push_back(absl::StrCat(pool_ref, ": slices disagree on resourceSliceCount"));
      continue;
    }
    if (static_cast<int64_t>(current.size()) != want) {
      // The allocator skips an incomplete pool; so do we (its devices are not units yet).
      problems->push_back(absl::StrCat(pool_ref, ": incomplete (", current.size(), " of ", want,
                                       " slices at generation ", generation, ")"));
      continue;
    }
    std::set<absl::string_view> names;
    bool duplicate = false;
    std::vector<PoolDevice> devices;
    for (const DraResourceSlice* s : current) {
      for (const DraDevice& d : s->devices) {
        if (!names.insert(d.name).second) duplicate = true;
        devices.push_back({s, &d});
      }
    }
    if (duplicate) {
      problems->push_back(absl::StrCat(pool_ref, ": a device name repeats across slices (invalid pool)"));
      continue;
    }
    out.insert(out.end(), devices.begin(), devices.end());
  }
  return out;
}

namespace {

std::string StringAttribute(const DraDevice& d, absl::string_view driver, absl::string_view name) {
  const DraAttribute* a = d.Attribute(driver, name);
  return a != nullptr && a->kind == DraAttribute::kString ? a->text : "";
}

}  // namespace

DraNodeUnits DraState::UnitsOf(absl::string_view class_name, absl::string_view node) const {
  DraNodeUnits out;
  const ParsedClass* parsed = Parsed(class_name);
  if (parsed == nullptr) {
    out.understood = false;
    out.problems.push_back(absl::StrCat("DeviceClass ", class_name, " not found"));
    return out;
  }
  if (!parsed->status.ok()) {
    out.understood = false;
    out.problems.emplace_back(parsed->status.message());
    return out;
  }
  const std::vector<DraSelector>* selectors = &parsed->selectors;
  bool unmodelled = false;
  for (const PoolDevice& pd : WalkNode(node, &out.problems, &unmodelled)) {
    bool selected = true;
    for (const DraSelector& s : *selectors) {
      std::string error;
      const DraSelector::Match m = s.Evaluate(pd.slice->driver, *pd.device, &error);
      if (m == DraSelector::Match::kError) {
        out.problems.push_back(absl::StrCat("device ", pd.slice->driver, "/", pd.slice->pool_name,
                                            "/", pd.device->name, ": CEL error: ", error));
      }
      if (m != DraSelector::Match::kYes) {
        selected = false;
        break;
      }
    }
    if (!selected) continue;
    DraUnit u;
    u.id = {pd.slice->driver, pd.slice->pool_name, pd.device->name};
    u.slice = pd.slice->name;
    u.uuid = StringAttribute(*pd.device, pd.slice->driver, "uuid");
    u.parent_uuid = StringAttribute(*pd.device, pd.slice->driver, "parentUUID");
    u.profile = StringAttribute(*pd.device, pd.slice->driver, "profile");
    u.product = StringAttribute(*pd.device, pd.slice->driver, "productName");
    u.shared = pd.device->allow_multiple_allocations;
    if (u.uuid.empty()) {
      // Dynamic MIG devices have no UUID until prepared (fact sheet §5): the unit is real,
      // its UUID unknown, and nothing may be matched by UUID against it.
      out.problems.push_back(absl::StrCat("device ", u.id.ToString(), ": no uuid attribute"));
    }
    out.units.push_back(std::move(u));
  }
  return out;
}

std::vector<DraHolder> DraState::HoldersOn(absl::string_view node) const {
  std::vector<std::string> problems;
  bool unmodelled = false;
  const std::vector<PoolDevice> walk = WalkNode(node, &problems, &unmodelled);
  std::set<DraDeviceId> on_node;
  for (const PoolDevice& pd : walk) {
    on_node.insert({pd.slice->driver, pd.slice->pool_name, pd.device->name});
  }
  std::vector<DraHolder> out;
  for (const auto* entry : ClaimsInPools(walk)) {
    const std::string& key = entry->first;
    const DraResourceClaim& c = entry->second;
    for (const DraAllocationResult& r : c.results) {
      if (r.admin_access) continue;
      DraDeviceId id{r.driver, r.pool, r.device};
      if (on_node.count(id) == 0) continue;
      DraHolder h;
      h.device = id;
      h.claim_key = key;
      h.claim_uid = c.uid;
      h.request = r.request;
      h.share_id = r.share_id;
      if (c.IsExtendedResourceClaim()) {
        h.extended = true;
        h.pod_name = c.owner_pod_name;
        h.pod_uid = c.owner_pod_uid;
        out.push_back(h);
        continue;
      }
      bool any_pod = false;
      for (const DraConsumerReference& ref : c.reserved_for) {
        if (ref.resource != "pods" || !ref.api_group.empty()) continue;
        DraHolder p = h;
        p.pod_name = ref.name;
        p.pod_uid = ref.uid;
        out.push_back(std::move(p));
        any_pod = true;
      }
      if (!any_pod) out.push_back(h);  // allocated, reserved for no pod: still holds the device
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Prediction

DraPrediction DraState::PredictExtendedResourcePick(absl::string_view class_name,
                                                    absl::string_view node, int64_t count,
                                                    const DraPredictOptions& options) const {
  DraPrediction out;
  const ParsedClass* parsed = Parsed(class_name);
  if (parsed == nullptr) {
    out.reason = absl::StrCat("DeviceClass ", class_name, " not found");
    return out;
  }
  if (!parsed->status.ok()) {
    out.reason = std::string(parsed->status.message());
    return out;
  }
  const std::vector<DraSelector>* selectors = &parsed->selectors;
  if (count < 1) {
    out.reason = "count below 1";
    return out;
  }
  std::vector<std::string> problems;
  bool unmodelled = false;
  const std::vector<PoolDevice> walk = WalkNode(node, &problems, &unmodelled);
  if (unmodelled) {
    out.reason = "slices select nodes by selector (not modelled)";
    return out;
  }
  // What allocated claims hold: exclusive use, and consumed capacity of shared devices.
  std::set<DraDeviceId> in_use;
  // Results that name no consumed capacity (written by an allocator without consumable
  // capacity, or by hand): how much of a shared device they take is unknown.
  std::set<DraDeviceId> unmetered;
  std::map<DraDeviceId, std::map<std::string, int64_t>> consumed;
  for (const auto* entry : ClaimsInPools(walk)) {
    for (const DraAllocationResult& r : entry->second.results) {
      if (r.admin_access) continue;  // admin access does not mark a device in use
      DraDeviceId id{r.driver, r.pool, r.device};
      in_use.insert(id);
      if (r.consumed_capacity_milli.empty()) unmetered.insert(id);
      for (const auto& [name, v] : r.consumed_capacity_milli) consumed[id][name] += v;
    }
  }
  // Allocators before 1.36's incubating one walk pools and slices in map order: only a class
  // whose devices all sit in one slice has a known order then.
  if (!options.sorted_walk) {
    std::set<std::string> slices_seen;
    for (const PoolDevice& pd : walk) {
      bool selected = true;
      for (const DraSelector& s : *selectors) {
        selected = selected && s.Evaluate(pd.slice->driver, *pd.device, nullptr) !=
                                   DraSelector::Match::kNo;
      }
      if (selected) slices_seen.insert(pd.slice->name);
    }
    if (slices_seen.size() > 1) {
      out.reason = "the class's devices span several slices and this allocator walks them in "
                   "map order";
      return out;
    }
  }
  for (const PoolDevice& pd : walk) {
    const DraDevice& d = *pd.device;
    bool selected = true;
    for (const DraSelector& s : *selectors) {
      std::string error;
      const DraSelector::Match m = s.Evaluate(pd.slice->driver, d, &error);
      if (m == DraSelector::Match::kError) {
        // The allocator fails the node on a CEL runtime error; which error and when depends
        // on its evaluation order: not predicted.
        out.kind = DraPrediction::kNoPrediction;
        out.devices.clear();
        out.reason = absl::StrCat("device ", d.name, ": CEL error: ", error);
        return out;
      }
      if (m == DraSelector::Match::kNo) {
        selected = false;
        break;
      }
    }
    if (!selected) continue;
    if (d.consumes_counters > 0 || d.binding_conditions || d.binds_to_node) {
      out.kind = DraPrediction::kNoPrediction;
      out.devices.clear();
      out.reason = absl::StrCat("device ", d.name,
                                ": counters or binding conditions are not modelled");
      return out;
    }
    bool tainted = false;
    for (const DraDeviceTaint& t : d.taints) tainted |= t.effect == "NoSchedule" || t.effect == "NoExecute";
    if (tainted) continue;  // the special claim tolerates nothing
    DraDeviceId id{pd.slice->driver, pd.slice->pool_name, d.name};
    if (!d.allow_multiple_allocations) {
      if (in_use.count(id) != 0) continue;
    } else {
      if (count > 1) {
        // Whether one request may take two shares of one device is not settled here.
        out.kind = DraPrediction::kNoPrediction;
        out.devices.clear();
        out.reason = "a request for several devices meets a shareable device";
        return out;
      }
      if (unmetered.count(id) != 0) {
        out.kind = DraPrediction::kNoPrediction;
        out.devices.clear();
        out.reason = absl::StrCat("device ", d.name,
                                  ": shared, with an allocation that lists no consumed capacity");
        return out;
      }
      // A share consumes the policy's default, or the full value without a policy (no
      // capacity requests in an extended-resource claim); it fits if nothing overflows.
      bool fits = true;
      const auto used_it = consumed.find(id);
      for (const auto& [name, cap] : d.capacity) {
        const int64_t want = cap.has_policy && cap.default_milli ? *cap.default_milli : cap.value_milli;
        int64_t used = 0;
        if (used_it != consumed.end()) {
          auto u = used_it->second.find(name);
          if (u != used_it->second.end()) used = u->second;
        }
        if (used > cap.value_milli || want > cap.value_milli - used) fits = false;
      }
      if (!fits) continue;
    }
    out.devices.push_back(id);
    if (static_cast<int64_t>(out.devices.size()) == count) {
      out.kind = DraPrediction::kDevices;
      return out;
    }
  }
  out.kind = DraPrediction::kNoDevice;
  out.devices.clear();
  out.reason = absl::StrCat("fewer than ", count, " free devices of ", class_name, " on ", node);
  return out;
}

// ---------------------------------------------------------------------------------------
// Bind verification

absl::Status DraState::VerifyAllocation(absl::string_view claim_key, absl::string_view node) const {
  auto it = claims_.find(claim_key);
  if (it == claims_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("ResourceClaim ", claim_key, " not mirrored"));
  }
  return VerifyClaim(it->second, node);
}

absl::Status DraState::VerifyClaim(const DraResourceClaim& c, absl::string_view node) const {
  const std::string claim_key = c.Key();
  if (!c.allocated || c.results.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("ResourceClaim ", claim_key, " is not allocated"));
  }
  if (!c.allocation_node.empty() && c.allocation_node != node) {
    return absl::FailedPreconditionError(absl::StrCat("ResourceClaim ", claim_key,
                                                      " is allocated on ", c.allocation_node,
                                                      ", not ", node));
  }
  for (const DraAllocationResult& r : c.results) {
    // "req/sub" results belong to request "req" (firstAvailable subrequests).
    const std::string request = r.request.substr(0, r.request.find('/'));
    const DraDeviceRequest* req = nullptr;
    for (const DraDeviceRequest& q : c.requests) {
      if (q.name == request) req = &q;
    }
    if (req == nullptr || req->first_available) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ResourceClaim ", claim_key, ": result for request ", r.request,
          req == nullptr ? " that the claim does not make" : " (prioritized list: not modelled)"));
    }
    DraNodeUnits units = UnitsOf(req->device_class_name, node);
    if (!units.understood) {
      return absl::FailedPreconditionError(absl::StrCat("ResourceClaim ", claim_key, ": ",
                                                        absl::StrJoin(units.problems, "; ")));
    }
    const DraDeviceId id{r.driver, r.pool, r.device};
    bool found = false;
    for (const DraUnit& u : units.units) found |= u.id == id;
    if (!found) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ResourceClaim ", claim_key, ": device ", id.ToString(), " is no device of class ",
          req->device_class_name, " on node ", node));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------
// Drift

namespace {

// The selector terms tools/catalog_render DeviceClassCel writes for an offering. Kept in step
// with it by tests/dra_state_test.cc (render -> decode -> no drift).
std::vector<DraSelector::Term> ExpectedTerms(const Offering& o) {
  using Term = DraSelector::Term;
  const std::string domain(kNvidiaDraDriver);
  std::vector<Term> out;
  out.push_back({Term::kDriverEquals, "", "", domain});
  out.push_back({Term::kAttributeEquals, domain, "type", o.unit == UnitKind::kMig ? "mig" : "gpu"});
  if (o.unit == UnitKind::kMig) out.push_back({Term::kAttributeEquals, domain, "profile", o.mig_profile});
  if (!o.product.empty()) {
    std::string pattern = "^";
    for (char c : o.product) {
      if (c == '-') {
        pattern += "[ -]";
      } else if (c == '.') {
        pattern += "[.]";
      } else {
        pattern.push_back(c);
      }
    }
    out.push_back({Term::kAttributeMatches, domain, "productName", pattern});
  }
  return out;
}

std::string TermText(const DraSelector::Term& t) {
  switch (t.kind) {
    case DraSelector::Term::kDriverEquals: return absl::StrCat("driver == '", t.literal, "'");
    case DraSelector::Term::kAttributeEquals: return absl::StrCat(t.name, " == '", t.literal, "'");
    case DraSelector::Term::kAttributeMatches:
      return absl::StrCat(t.name, ".matches('", t.literal, "')");
  }
  return "";
}

}  // namespace

std::vector<std::string> DraState::Drift(const Catalog& catalog) const {
  std::vector<std::string> out;
  for (const Offering& o : catalog.offerings()) {
    if (o.device_class.empty()) continue;
    const DraDeviceClass* c = DeviceClass(o.device_class);
    if (c == nullptr) {
      const DraDeviceClass* mapper = ClassForResource(o.resource);
      out.push_back(absl::StrCat(o.resource, ": DeviceClass \"", o.device_class, "\" not found",
                                 mapper == nullptr
                                     ? ""
                                     : absl::StrCat("; DeviceClass \"", mapper->name,
                                                    "\" serves the name instead")));
      continue;
    }
    if (c->extended_resource_name != o.resource) {
      out.push_back(absl::StrCat(o.resource, ": DeviceClass \"", c->name,
                                 "\" publishes extendedResourceName \"",
                                 c->extended_resource_name, "\""));
    }
    const DraDeviceClass* mapper = ClassForResource(o.resource);
    if (mapper != nullptr && mapper != c) {
      out.push_back(absl::StrCat(o.resource, ": served by DeviceClass \"", mapper->name,
                                 "\", not the catalog's \"", c->name, "\""));
    }
    const ParsedClass* parsed = Parsed(c->name);  // never null: c is mirrored
    if (!parsed->status.ok()) {
      out.push_back(absl::StrCat(o.resource, ": ", parsed->status.message()));
      continue;
    }
    std::vector<DraSelector::Term> have;
    for (const DraSelector& s : parsed->selectors) {
      have.insert(have.end(), s.terms().begin(), s.terms().end());
    }
    const std::vector<DraSelector::Term> want = ExpectedTerms(o);
    std::vector<std::string> missing, extra;
    for (const auto& t : want) {
      if (std::find(have.begin(), have.end(), t) == have.end()) missing.push_back(TermText(t));
    }
    for (const auto& t : have) {
      if (std::find(want.begin(), want.end(), t) == want.end()) extra.push_back(TermText(t));
    }
    if (!missing.empty() || !extra.empty()) {
      out.push_back(absl::StrCat(o.resource, ": DeviceClass \"", c->name, "\" selectors differ",
                                 missing.empty() ? "" : "; lacks ", absl::StrJoin(missing, ", "),
                                 extra.empty() ? "" : "; adds ", absl::StrJoin(extra, ", ")));
    }
  }
  return out;
}

}  // namespace gse
