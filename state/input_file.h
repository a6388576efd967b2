// Reading an input file that a flag names (catalog, snapshot, quota file, scheduler config):
// the whole file, bounded by the JSON decoder's limit, with errors that name the flag and the
// file so that a user knows which argument to fix.
#ifndef GSE_STATE_INPUT_FILE_H_
#define GSE_STATE_INPUT_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gse {

// The file's bytes. InvalidArgument "FLAG=PATH: cannot read the file: REASON" when it cannot
// be opened or read. Reading stops a little past kMaxJsonBytes (state/k8s_objects.h): the
// decoder then rejects the document as too large instead of us holding an unbounded file.
absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path);

}  // namespace gse

#endif  // GSE_STATE_INPUT_FILE_H_
