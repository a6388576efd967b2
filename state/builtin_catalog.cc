// The GPU catalog compiled into the binary (Catalog::BuiltIn). It is used when no catalog
// file is given, so that a standalone start needs nothing else; catalog_test checks that it
// parses, and which names it offers.
//
// Choices worth knowing:
// * Resource names follow what the NVIDIA device plugin advertises: nvidia.com/gpu for whole
//   GPUs, nvidia.com/mig-<profile> under the "mixed" MIG strategy, and "<name>.shared" for
//   time-sliced resources with `renameByDefault: true`.
// * Generic MIG names (mig-1g.5gb, mig-1g.10gb, ...) carry no product: the same profile name
//   exists on several boards (A100-SXM4-40GB and A100-PCIE-40GB; A100-80GB and H100-80GB),
//   and the device plugin only advertises a profile where the hardware has it.
// * MPS: the device plugin advertises MPS replicas as nvidia.com/gpu (or nvidia.com/gpu.shared
//   with renameByDefault), which would collide with the exclusive and time-sliced offerings
//   and make one name mean two sharing modes. The built-in catalog therefore expects the
//   MPS sharing config to rename the resource (`sharing.mps.resources[].rename:
//   nvidia.com/gpu.mps`). ".mps" mirrors the plugin's own ".shared" suffix, so the name says
//   what it is, and it is a valid, distinct extended resource name.
// * memory is per unit. For offerings that span products (nvidia.com/gpu and its shared and
//   MPS forms, nvidia.com/a100) it is the smallest board memory among the products this
//   catalog knows (A10G 24 GB; A100 40 GB), i.e. what a pod can count on.
// * DeviceClasses (DRA, docs/dra.md): exclusive offerings only, MIG ones with the profile's
//   dot as a dash (mig-1g-5gb.nvidia.com), as NVIDIA's demo classes and the DRA fact sheet
//   spell them. Time-sliced and MPS offerings have none: DRA gives each pod's
//   extended-resource claim a whole device, so they would not be shared (catalog check warns).
// * Aliases are migration names and must never collide: the differentiated whole-GPU names
//   keep the earlier "gpu-<model>" spelling as aliases (nvidia.com/gpu-a100 -> nvidia.com/a100).
//   No alias points at nvidia.com/gpu, which is its own offering.
#include "state/catalog.h"

namespace gse {

absl::string_view Catalog::BuiltInYaml() {
  static constexpr char kYaml[] = R"yaml(
apiVersion: gpu.themelio.io/v1
kind: GpuCatalog
offerings:
# --- Whole GPUs, any product ---------------------------------------------------------
- resource: nvidia.com/gpu
  unit: gpu
  sharing: exclusive
  memory: 24Gi
  deviceClass: gpu-whole.nvidia.com
  displayName: NVIDIA GPU (whole)
- resource: nvidia.com/gpu.shared
  unit: gpu
  sharing: time-sliced
  replicas: 4
  memory: 24Gi
  displayName: NVIDIA GPU (time-sliced)
- resource: nvidia.com/gpu.mps
  unit: gpu
  sharing: mps
  replicas: 4
  memory: 24Gi
  displayName: NVIDIA GPU (MPS share)

# --- MIG profiles of A100 40GB (SXM4 and PCIe) -----------------------------------------
- resource: nvidia.com/mig-1g.5gb
  unit: mig
  migProfile: 1g.5gb
  memory: 5Gi
  deviceClass: mig-1g-5gb.nvidia.com
  displayName: NVIDIA MIG 1g.5gb (A100 40GB)
- resource: nvidia.com/mig-2g.10gb
  unit: mig
  migProfile: 2g.10gb
  memory: 10Gi
  deviceClass: mig-2g-10gb.nvidia.com
  displayName: NVIDIA MIG 2g.10gb (A100 40GB)
- resource: nvidia.com/mig-3g.20gb
  unit: mig
  migProfile: 3g.20gb
  memory: 20Gi
  deviceClass: mig-3g-20gb.nvidia.com
  displayName: NVIDIA MIG 3g.20gb (A100 40GB)
- resource: nvidia.com/mig-4g.20gb
  unit: mig
  migProfile: 4g.20gb
  memory: 20Gi
  deviceClass: mig-4g-20gb.nvidia.com
  displayName: NVIDIA MIG 4g.20gb (A100 40GB)
- resource: nvidia.com/mig-7g.40gb
  unit: mig
  migProfile: 7g.40gb
  memory: 40Gi
  deviceClass: mig-7g-40gb.nvidia.com
  displayName: NVIDIA MIG 7g.40gb (A100 40GB)

# --- MIG profiles of A100 80GB and H100 80GB -------------------------------------------
- resource: nvidia.com/mig-1g.10gb
  unit: mig
  migProfile: 1g.10gb
  memory: 10Gi
  deviceClass: mig-1g-10gb.nvidia.com
  displayName: NVIDIA MIG 1g.10gb (A100/H100 80GB)
- resource: nvidia.com/mig-2g.20gb
  unit: mig
  migProfile: 2g.20gb
  memory: 20Gi
  deviceClass: mig-2g-20gb.nvidia.com
  displayName: NVIDIA MIG 2g.20gb (A100/H100 80GB)
- resource: nvidia.com/mig-3g.40gb
  unit: mig
  migProfile: 3g.40gb
  memory: 40Gi
  deviceClass: mig-3g-40gb.nvidia.com
  displayName: NVIDIA MIG 3g.40gb (A100/H100 80GB)
- resource: nvidia.com/mig-4g.40gb
  unit: mig
  migProfile: 4g.40gb
  memory: 40Gi
  deviceClass: mig-4g-40gb.nvidia.com
  displayName: NVIDIA MIG 4g.40gb (A100/H100 80GB)
- resource: nvidia.com/mig-7g.80gb
  unit: mig
  migProfile: 7g.80gb
  memory: 80Gi
  deviceClass: mig-7g-80gb.nvidia.com
  displayName: NVIDIA MIG 7g.80gb (A100/H100 80GB)
- resource: nvidia.com/mig-1g.20gb
  unit: mig
  migProfile: 1g.20gb
  memory: 20Gi
  deviceClass: mig-1g-20gb.nvidia.com
  displayName: NVIDIA MIG 1g.20gb (H100 80GB)

# --- Time-sliced MIG slices (device plugin renameByDefault: "<name>.shared") -----------
- resource: nvidia.com/mig-1g.5gb.shared
  unit: mig
  sharing: time-sliced
  replicas: 4
  migProfile: 1g.5gb
  memory: 5Gi
  displayName: NVIDIA MIG 1g.5gb (A100 40GB, time-sliced)
- resource: nvidia.com/mig-2g.10gb.shared
  unit: mig
  sharing: time-sliced
  replicas: 2
  migProfile: 2g.10gb
  memory: 10Gi
  displayName: NVIDIA MIG 2g.10gb (A100 40GB, time-sliced)
- resource: nvidia.com/mig-3g.20gb.shared
  unit: mig
  sharing: time-sliced
  replicas: 2
  migProfile: 3g.20gb
  memory: 20Gi
  displayName: NVIDIA MIG 3g.20gb (A100 40GB, time-sliced)
- resource: nvidia.com/mig-1g.10gb.shared
  unit: mig
  sharing: time-sliced
  replicas: 4
  migProfile: 1g.10gb
  memory: 10Gi
  displayName: NVIDIA MIG 1g.10gb (A100/H100 80GB, time-sliced)

# --- Differentiated names: the product is part of the name -----------------------------
- resource: nvidia.com/a100
  aliases: [nvidia.com/gpu-a100]
  unit: gpu
  product: NVIDIA-A100
  memory: 40Gi
  deviceClass: a100.nvidia.com
  displayName: NVIDIA A100 (whole)
- resource: nvidia.com/h100
  aliases: [nvidia.com/gpu-h100]
  unit: gpu
  product: NVIDIA-H100
  memory: 80Gi
  deviceClass: h100.nvidia.com
  displayName: NVIDIA H100 (whole)
- resource: nvidia.com/a10g
  aliases: [nvidia.com/gpu-a10g]
  unit: gpu
  product: NVIDIA-A10G
  memory: 24Gi
  deviceClass: a10g.nvidia.com
  displayName: NVIDIA A10G (whole)
- resource: nvidia.com/a100-mig-1g.5gb
  unit: mig
  migProfile: 1g.5gb
  product: NVIDIA-A100
  memory: 5Gi
  deviceClass: a100-mig-1g-5gb.nvidia.com
  displayName: NVIDIA A100 MIG 1g.5gb
- resource: nvidia.com/a100-mig-1g.5gb.shared
  unit: mig
  sharing: time-sliced
  replicas: 4
  migProfile: 1g.5gb
  product: NVIDIA-A100
  memory: 5Gi
  displayName: NVIDIA A100 MIG 1g.5gb (time-sliced)
)yaml";
  return absl::string_view(kYaml, sizeof(kYaml) - 1);
}

}  // namespace gse
