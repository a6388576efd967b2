// One YAML document from a text (contract in yaml_document.h).
#include "state/yaml_document.h"

#include <exception>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "yaml-cpp/eventhandler.h"

namespace gse {
namespace {

// Records where a document starts; builds nothing, so probing costs no allocation per node.
class DocumentStart : public YAML::EventHandler {
 public:
  const YAML::Mark& mark() const { return mark_; }

  void OnDocumentStart(const YAML::Mark& mark) override { mark_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  YAML::Mark mark_ = YAML::Mark::null_mark();
};

// Why the parser made no progress at `mark`, naming the character there when it is printable.
std::string StuckTokenMessage(absl::string_view text, const YAML::Mark& mark) {
  const bool known = mark.pos >= 0 && static_cast<size_t>(mark.pos) < text.size() &&
                     absl::ascii_isprint(static_cast<unsigned char>(text[mark.pos]));
  if (!known) return "this token cannot start a YAML node";
  const char c = text[static_cast<size_t>(mark.pos)];
  std::string msg = absl::StrCat("'", absl::string_view(&c, 1), "' cannot start a YAML node");
  if (c == ',') absl::StrAppend(&msg, " (',' only separates the entries of [...] or {...})");
  return msg;
}

// Counts the documents of `text` without building them: OK for none or one, else the error.
// Three documents are enough to see a stuck parser (the second and the third start at the
// same place) and a real second document; a longer stream is refused all the same.
absl::Status CheckOneDocument(absl::string_view text, absl::string_view what) {
  std::istringstream in{std::string(text)};
  YAML::Parser parser(in);
  YAML::Mark first_extra = YAML::Mark::null_mark();
  YAML::Mark previous = YAML::Mark::null_mark();
  for (int docs = 0; docs < 3; ++docs) {
    DocumentStart start;
    if (!parser.HandleNextDocument(start)) break;
    if (docs > 0 && start.mark().pos == previous.pos) {
      return YamlSyntaxError(start.mark(), StuckTokenMessage(text, start.mark()));
    }
    if (docs == 1) first_extra = start.mark();
    previous = start.mark();
  }
  if (first_extra.is_null()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "document stream holds a second YAML document at line %d, column %d; %s is exactly one "
      "YAML document",
      first_extra.line + 1, first_extra.column + 1, what));
}

}  // namespace

absl::Status YamlSyntaxError(const YAML::Mark& mark, absl::string_view msg) {
  if (mark.is_null() || mark.line < 0) {
    return absl::InvalidArgumentError(absl::StrCat("YAML syntax error: ", msg));
  }
  return absl::InvalidArgumentError(absl::StrFormat("YAML syntax error at line %d, column %d: %s",
                                                    mark.line + 1, mark.column + 1, msg));
}

absl::StatusOr<YAML::Node> LoadOneYamlDocument(absl::string_view text, absl::string_view what) {
  // yaml-cpp reports errors by throwing; none may cross this function.
  try {
    if (absl::Status s = CheckOneDocument(text, what); !s.ok()) return s;
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return YamlSyntaxError(e.mark, e.msg);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse YAML: ", e.what()));
  } catch (...) {
    return absl::InvalidArgumentError("cannot parse YAML: unknown error");
  }
}

}  // namespace gse
