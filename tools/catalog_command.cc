// gpu-slice-extender catalog render|check: see catalog_command.h.
#include "tools/catalog_command.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "state/catalog.h"
#include "state/input_file.h"
#include "state/k8s_objects.h"
#include "tools/catalog_render.h"

namespace gse {
namespace {

constexpr int kExitCheckFailed = 1;
constexpr int kExitUsage = 2;

void PrintCatalogUsage(const std::string& version) {
  std::string out = absl::StrCat(
      "gpu-slice-extender catalog ", version,
      ": render what the GPU catalog implies, and check the rest of the platform against it.\n\n"
      "Usage: gpu-slice-extender catalog render [--catalog=FILE] --what=",
      absl::StrJoin(RenderTargetNames(), "|"),
      "\n"
      "       gpu-slice-extender catalog check [--catalog=FILE] [--scheduler-config=FILE ...]\n"
      "                                        [--snapshot=FILE] [--strict]\n"
      "                                        [--score-all-pods]\n\n"
      "render prints YAML to stdout:\n"
      "  device-classes      DRA DeviceClasses (resource.k8s.io/v1): extendedResourceName and\n"
      "                      a CEL selector on the NVIDIA DRA driver's attributes; the node\n"
      "                      label of DRA-capable nodes in a gpu.themelio.io/dra-node-label\n"
      "                      annotation\n"
      "  resource-quotas     a ResourceQuota template with every quota key of the catalog\n"
      "  kubeflow            the notebook spawner's GPU vendor list (limitsKey, uiName)\n"
      "  scheduler-extender  the managedResources block for kube-scheduler's extenders entry\n\n"
      "check prints one problem a line, \"error|warning: FILE: FIELD: message\", then a summary:\n"
      "  always              the catalog itself (shared deviceClass or quotaKey, ...; a\n"
      "                      time-sliced or MPS offering with a DRA deviceClass: warning)\n"
      "  --scheduler-config  a KubeSchedulerConfiguration: kube-scheduler's extender validation\n"
      "                      and managedResources == the catalog's names and aliases (repeatable)\n"
      "  --snapshot          `kubectl get nodes -o json` (or any List with Nodes): GPU resources\n"
      "                      the catalog does not know (error), offerings no node advertises\n"
      "                      (warning)\n"
      "  --score-all-pods    the extender runs with --score-all-pods: its entry must have no\n"
      "                      managedResources (kube-scheduler then sends it every pod)\n"
      "  --strict            warnings fail too\n"
      "  exit status 0 no errors, 1 problems found, 2 usage error (bad flag, unreadable file,\n"
      "  invalid catalog or snapshot).\n\n"
      "Flags:\n"
      "  --catalog=FILE  GPU catalog (YAML or JSON); default: the built-in catalog\n");
  std::fputs(out.c_str(), stdout);
}

[[noreturn]] void CatalogFail(absl::string_view message) {
  std::fprintf(stderr, "gpu-slice-extender catalog: %.*s\n", static_cast<int>(message.size()),
               message.data());
  std::exit(kExitUsage);
}

struct CatalogArgs {
  std::string action;  // "render" or "check"
  std::string catalog;
  std::string what;
  std::vector<std::string> scheduler_configs;
  std::string snapshot;
  bool strict = false;
  bool score_all_pods = false;
};

// argv[0] is "catalog". --name=value or --name value; '_' and '-' are the same in names.
CatalogArgs ParseCatalogArgs(int argc, char** argv, const std::string& version) {
  CatalogArgs args;
  int i = 1;
  if (i < argc) {
    const std::string first = argv[i];
    if (first == "--help" || first == "-h" || first == "help") {
      PrintCatalogUsage(version);
      std::exit(0);
    }
    if (first == "render" || first == "check") {
      args.action = first;
      ++i;
    }
  }
  if (args.action.empty()) {
    CatalogFail(absl::StrCat(
        i < argc ? absl::StrCat("unknown action \"", argv[i], "\"") : std::string("no action"),
        ": want `catalog render` or `catalog check` (see gpu-slice-extender catalog --help)"));
  }
  const bool render = args.action == "render";
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      CatalogFail(
          absl::StrCat("unexpected argument \"", arg,
                       "\" (flags are --name=value; see gpu-slice-extender catalog --help)"));
    }
    const size_t eq = arg.find('=');
    const std::string typed = arg.substr(0, eq);
    const std::string name = absl::StrReplaceAll(typed.substr(2), {{"_", "-"}});
    if (name == "help") {
      PrintCatalogUsage(version);
      std::exit(0);
    }
    if ((name == "strict" || name == "score-all-pods") && !render) {
      bool& flag = name == "strict" ? args.strict : args.score_all_pods;
      if (eq == std::string::npos || arg.substr(eq + 1) == "true") {
        flag = true;
      } else if (arg.substr(eq + 1) == "false") {
        flag = false;
      } else {
        CatalogFail(absl::StrCat(typed, "=\"", arg.substr(eq + 1), "\": want true or false"));
      }
      continue;
    }
    std::string* target = nullptr;
    if (name == "catalog") {
      target = &args.catalog;
    } else if (name == "what" && render) {
      target = &args.what;
    } else if (name == "snapshot" && !render) {
      target = &args.snapshot;
    } else if (name == "scheduler-config" && !render) {
      args.scheduler_configs.emplace_back();
      target = &args.scheduler_configs.back();
    } else {
      const bool other = name == "what" || name == "snapshot" || name == "scheduler-config" ||
                         name == "strict" || name == "score-all-pods";
      CatalogFail(absl::StrCat(
          other ? "flag " : "unknown flag ", typed,
          other ? absl::StrCat(" does not apply to `catalog ", args.action, "`") : std::string(),
          " (see gpu-slice-extender catalog --help)"));
    }
    if (eq != std::string::npos) {
      *target = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      *target = argv[++i];
    } else {
      CatalogFail(absl::StrCat("flag ", typed, " needs a value: ", typed, "=VALUE"));
    }
    if (target->empty()) CatalogFail(absl::StrCat("flag ", typed, " needs a non-empty value"));
  }
  if (render && args.what.empty()) {
    CatalogFail(
        absl::StrCat("catalog render needs --what=", absl::StrJoin(RenderTargetNames(), "|")));
  }
  return args;
}

}  // namespace

int RunCatalogCommand(int argc, char** argv, const std::string& version) {
  const CatalogArgs args = ParseCatalogArgs(argc, argv, version);

  std::shared_ptr<const Catalog> catalog;
  std::string catalog_name;
  if (args.catalog.empty()) {
    catalog = std::make_shared<const Catalog>(Catalog::BuiltIn());
    catalog_name = "built-in catalog";
  } else {
    absl::StatusOr<Catalog> loaded = Catalog::LoadFile(args.catalog);
    if (!loaded.ok()) CatalogFail(absl::StrCat("--catalog: ", loaded.status().message()));
    catalog = std::make_shared<const Catalog>(std::move(*loaded));
    catalog_name = absl::StrCat("catalog ", args.catalog);
  }

  if (args.action == "render") {
    absl::StatusOr<RenderTarget> target = ParseRenderTarget(args.what);
    if (!target.ok()) CatalogFail(target.status().message());
    const std::string yaml = RenderCatalog(*catalog, *target);
    if (std::fwrite(yaml.data(), 1, yaml.size(), stdout) != yaml.size() ||
        std::fflush(stdout) != 0) {
      CatalogFail(absl::StrCat("cannot write to stdout: ", std::strerror(errno)));
    }
    return 0;
  }

  // Read everything first: a usage error (exit 2) must not follow half a report.
  std::vector<std::pair<std::string, std::string>> configs;  // file, text
  for (const std::string& file : args.scheduler_configs) {
    absl::StatusOr<std::string> text = ReadFlagFile("--scheduler-config", file);
    if (!text.ok()) CatalogFail(text.status().message());
    configs.emplace_back(file, std::move(*text));
  }
  std::vector<NodeAdvertisement> nodes;
  if (!args.snapshot.empty()) {
    absl::StatusOr<std::string> text = ReadFlagFile("--snapshot", args.snapshot);
    if (!text.ok()) CatalogFail(text.status().message());
    absl::StatusOr<ObjectBatch> batch = DecodeObjects(*text);
    if (!batch.ok()) {
      CatalogFail(absl::StrCat("--snapshot=", args.snapshot, ": ", batch.status().message()));
    }
    for (NodeObject& n : batch->nodes) {
      nodes.push_back({std::move(n.name), std::move(n.labels), std::move(n.allocatable_milli)});
    }
  }

  CheckReport report;
  std::vector<std::string> checked = {catalog_name};
  CheckCatalog(*catalog, catalog_name, &report);
  for (const auto& [file, text] : configs) {
    CheckSchedulerConfig(*catalog, catalog_name, text, file, &report, args.score_all_pods);
    checked.push_back(file);
  }
  if (!args.snapshot.empty()) {
    CheckNodes(*catalog, catalog_name, nodes, args.snapshot, &report);
    checked.push_back(absl::StrCat(args.snapshot, " (", nodes.size(), " nodes)"));
  }
  std::string out;
  for (const CheckProblem& p : report.problems()) absl::StrAppend(&out, p.Line(), "\n");
  const bool failed = report.Failed(args.strict);
  absl::StrAppend(&out, "catalog check: ", failed ? "FAILED" : "OK", ", ", report.errors(),
                  " error(s), ", report.warnings(), " warning(s)",
                  args.strict && report.warnings() > 0 ? " (--strict: warnings fail)" : "",
                  "; checked ", absl::StrJoin(checked, ", "), "\n");
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return failed ? kExitCheckFailed : 0;
}

}  // namespace gse
