// The demo cluster compiled into the binary: examples/demo-cluster.json (a `kubectl get
// namespaces,resourcequotas,nodes,pods -A -o json` List), embedded at build time by
// extender/CMakeLists.txt, so that `gpu-slice-extender` started without --snapshot serves a
// complete cluster and the requests in examples/ work against it.
#ifndef GSE_EXTENDER_DEMO_SNAPSHOT_H_
#define GSE_EXTENDER_DEMO_SNAPSHOT_H_

#include "absl/strings/string_view.h"

namespace gse {

// The file's bytes, unchanged; valid for the life of the program.
absl::string_view DemoSnapshotJson();

}  // namespace gse

#endif  // GSE_EXTENDER_DEMO_SNAPSHOT_H_
