// `gpu-slice-extender catalog render|check`: a command-line tool on the extender's binary that
// renders what the GPU catalog implies (DRA DeviceClasses, ResourceQuota templates, Kubeflow's
// GPU list, kube-scheduler's managedResources) and checks scheduler configurations and
// cluster snapshots for drift against it (catalog_render.h). It is not part of the service:
// nothing on the request path links it. It has its own small flag set, parsed by hand before
// anything of the server runs, so that each --help lists only what applies.
#ifndef GSE_TOOLS_CATALOG_COMMAND_H_
#define GSE_TOOLS_CATALOG_COMMAND_H_

#include <string>

namespace gse {

// argv[0] is "catalog". Returns the exit status: 0 rendered or no problems, 1 check found
// problems; usage errors (bad flag, unreadable file, invalid catalog) print a message naming
// the flag and exit(2). `version` is printed by --help.
int RunCatalogCommand(int argc, char** argv, const std::string& version);

}  // namespace gse

#endif  // GSE_TOOLS_CATALOG_COMMAND_H_
