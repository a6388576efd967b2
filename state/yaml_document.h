// One YAML document from a text, through yaml-cpp 0.7 (Debian bookworm), without the ways that
// library can fail to return.
//
// yaml-cpp's LoadAll() loops for ever on a stray token that cannot start a node (a ',' where a
// node should begin, e.g. the 6-byte `!Th,e*` or a lone `,`): SingleDocParser::HandleNode emits
// a null node without consuming that token, so every further HandleNextDocument() call
// "parses" another empty document at the same position and LoadAll() grows its vector until
// memory runs out (upstream jbeder/yaml-cpp#1319, fixed after 0.8). LoadOneYamlDocument never
// calls LoadAll(): it asks the parser for at most three documents with a handler that builds
// nothing, refuses a document that starts where the previous one started (no progress: that
// token) and a second document, and only then builds the tree of the first one with Load(),
// which reads one document and so cannot loop.
//
// The caller bounds the text first (size, nesting, token count: yaml-cpp recurses per level
// and allocates per node). Errors are InvalidArgument with the line and column, never an
// exception. Stateless and thread-safe.
#ifndef GSE_STATE_YAML_DOCUMENT_H_
#define GSE_STATE_YAML_DOCUMENT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace gse {

// The only document of `text` (a null node when the stream holds none). `what` names the
// file kind in the error for a second document ("a catalog is exactly one YAML document").
absl::StatusOr<YAML::Node> LoadOneYamlDocument(absl::string_view text, absl::string_view what);

// "YAML syntax error at line L, column C: msg" (1-based), or without position when the mark
// is unknown.
absl::Status YamlSyntaxError(const YAML::Mark& mark, absl::string_view msg);

}  // namespace gse

#endif  // GSE_STATE_YAML_DOCUMENT_H_
