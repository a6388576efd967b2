// Inventory: parsing, validation, order and the JSON form.
#include "agent/inventory.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"

namespace gse::agent {
namespace {

constexpr size_t kMaxQuotedBytes = 80;
constexpr size_t kMaxProductBytes = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr int64_t kMaxMemoryMib = int64_t{1} << 30;  // 1 PiB: anything above is a typo

std::string Quote(absl::string_view value) {
  if (value.size() > kMaxQuotedBytes) {
    return absl::StrCat("\"", absl::CHexEscape(value.substr(0, kMaxQuotedBytes)), "\"...");
  }
  return absl::StrCat("\"", absl::CHexEscape(value), "\"");
}

absl::Status Invalid(absl::string_view path, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

std::string UuidError(absl::string_view uuid) {
  if (uuid.empty()) return "is empty";
  if (uuid.size() > kMaxUuidBytes) {
    return absl::StrCat(Quote(uuid), " is longer than ", kMaxUuidBytes, " bytes");
  }
  for (char c : uuid) {
    if (c <= ' ' || c > '~' || c == ':' || c == ',' || c == '"' || c == '\\') {
      return absl::StrCat(Quote(uuid),
                          " may hold only printable characters other than ':' ',' '\"' '\\'");
    }
  }
  return "";
}

// Field readers over a JSON object; each names the path on error.
class Fields {
 public:
  Fields(const rapidjson::Value& object, std::string path) : o_(object), path_(std::move(path)) {}

  absl::Status String(const char* name, size_t max_bytes, std::string* out) const {
    auto it = o_.FindMember(name);
    if (it == o_.MemberEnd()) return Invalid(Path(name), "missing");
    if (!it->value.IsString()) return Invalid(Path(name), "must be a string");
    absl::string_view v(it->value.GetString(), it->value.GetStringLength());
    if (v.size() > max_bytes) {
      return Invalid(Path(name), absl::StrCat(Quote(v), " is longer than ", max_bytes, " bytes"));
    }
    *out = std::string(v);
    return absl::OkStatus();
  }
  // Integer in [lo, hi]; `required` false leaves *out untouched when absent.
  absl::Status Int(const char* name, int64_t lo, int64_t hi, bool required, int64_t* out) const {
    auto it = o_.FindMember(name);
    if (it == o_.MemberEnd()) {
      return required ? Invalid(Path(name), "missing") : absl::OkStatus();
    }
    if (!it->value.IsInt64()) return Invalid(Path(name), "must be an integer");
    int64_t v = it->value.GetInt64();
    if (v < lo || v > hi) {
      return Invalid(Path(name), absl::StrCat(v, " is outside ", lo, "..", hi));
    }
    *out = v;
    return absl::OkStatus();
  }
  absl::Status Bool(const char* name, bool* out) const {
    auto it = o_.FindMember(name);
    if (it == o_.MemberEnd()) return absl::OkStatus();
    if (!it->value.IsBool()) return Invalid(Path(name), "must be true or false");
    *out = it->value.GetBool();
    return absl::OkStatus();
  }
  // An optional array member (absent: nullptr).
  absl::StatusOr<const rapidjson::Value*> Array(const char* name, size_t max_items) const {
    auto it = o_.FindMember(name);
    if (it == o_.MemberEnd() || it->value.IsNull()) return nullptr;
    if (!it->value.IsArray()) return Invalid(Path(name), "must be an array");
    if (it->value.Size() > max_items) {
      return Invalid(Path(name), absl::StrCat(it->value.Size(), " items, at most ", max_items));
    }
    return &it->value;
  }
  std::string Path(absl::string_view name) const { return absl::StrCat(path_, ".", name); }

 private:
  const rapidjson::Value& o_;
  std::string path_;
};

absl::StatusOr<MigDevice> DecodeMigDevice(const rapidjson::Value& v, const std::string& path) {
  if (!v.IsObject()) return Invalid(path, "must be an object");
  Fields f(v, path);
  MigDevice m;
  int64_t placement = 0, gi = 0;
  if (auto s = f.String("uuid", 1024, &m.uuid); !s.ok()) return s;
  if (auto s = f.String("profile", 64, &m.profile); !s.ok()) return s;
  if (auto s = f.Int("memoryMiB", 0, kMaxMemoryMib, false, &m.memory_mib); !s.ok()) return s;
  if (auto s = f.Int("placementStart", 0, 255, true, &placement); !s.ok()) return s;
  if (auto s = f.Int("gpuInstanceId", 0, 0xFFFFFFFEll, false, &gi); !s.ok()) return s;
  if (auto s = f.Bool("healthy", &m.healthy); !s.ok()) return s;
  m.placement_start = static_cast<int32_t>(placement);
  m.gpu_instance_id = static_cast<uint32_t>(gi);
  return m;
}

absl::StatusOr<Gpu> DecodeGpu(const rapidjson::Value& v, const std::string& path) {
  if (!v.IsObject()) return Invalid(path, "must be an object");
  Fields f(v, path);
  Gpu g;
  int64_t index = 0;
  if (auto s = f.Int("index", 0, kMaxGpus - 1, true, &index); !s.ok()) return s;
  g.index = static_cast<int32_t>(index);
  if (auto s = f.String("uuid", 1024, &g.uuid); !s.ok()) return s;
  if (auto s = f.String("product", kMaxProductBytes, &g.product); !s.ok()) return s;
  if (auto s = f.Int("memoryMiB", 0, kMaxMemoryMib, false, &g.memory_mib); !s.ok()) return s;
  if (auto s = f.Bool("migEnabled", &g.mig_enabled); !s.ok()) return s;
  if (auto s = f.Bool("healthy", &g.healthy); !s.ok()) return s;
  auto migs = f.Array("migDevices", kMaxMigDevicesPerGpu);
  if (!migs.ok()) return migs.status();
  if (*migs != nullptr) {
    for (rapidjson::SizeType i = 0; i < (*migs)->Size(); ++i) {
      auto m = DecodeMigDevice((**migs)[i], absl::StrCat(path, ".migDevices[", i, "]"));
      if (!m.ok()) return m.status();
      g.mig_devices.push_back(*std::move(m));
    }
  }
  return g;
}

}  // namespace

void SortInventory(Inventory& inventory) {
  std::sort(inventory.gpus.begin(), inventory.gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.index < b.index; });
  for (Gpu& g : inventory.gpus) {
    std::sort(g.mig_devices.begin(), g.mig_devices.end(),
              [](const MigDevice& a, const MigDevice& b) {
                return a.placement_start < b.placement_start;
              });
  }
}

absl::Status ValidateInventory(const Inventory& inventory) {
  if (inventory.gpus.size() > static_cast<size_t>(kMaxGpus)) {
    return Invalid("gpus", absl::StrCat(inventory.gpus.size(), " GPUs, at most ", kMaxGpus));
  }
  std::set<int32_t> indices;
  std::set<std::string> uuids;
  for (size_t i = 0; i < inventory.gpus.size(); ++i) {
    const Gpu& g = inventory.gpus[i];
    const std::string path = absl::StrCat("gpus[", i, "]");
    if (g.index < 0 || g.index >= kMaxGpus) {
      return Invalid(path + ".index", absl::StrCat(g.index, " is outside 0..", kMaxGpus - 1));
    }
    if (!indices.insert(g.index).second) {
      return Invalid(path + ".index", absl::StrCat(g.index, " is used by two GPUs"));
    }
    if (std::string err = UuidError(g.uuid); !err.empty()) return Invalid(path + ".uuid", err);
    if (!uuids.insert(g.uuid).second) {
      return Invalid(path + ".uuid", absl::StrCat(Quote(g.uuid), " appears twice"));
    }
    if (g.product.empty()) return Invalid(path + ".product", "is empty");
    if (!g.mig_enabled && !g.mig_devices.empty()) {
      return Invalid(path + ".migDevices", "MIG devices on a GPU whose migEnabled is false");
    }
    if (g.mig_devices.size() > static_cast<size_t>(kMaxMigDevicesPerGpu)) {
      return Invalid(path + ".migDevices",
                     absl::StrCat(g.mig_devices.size(), " items, at most ", kMaxMigDevicesPerGpu));
    }
    std::set<int32_t> starts;
    for (size_t j = 0; j < g.mig_devices.size(); ++j) {
      const MigDevice& m = g.mig_devices[j];
      const std::string mpath = absl::StrCat(path, ".migDevices[", j, "]");
      if (std::string err = UuidError(m.uuid); !err.empty()) return Invalid(mpath + ".uuid", err);
      if (!uuids.insert(m.uuid).second) {
        return Invalid(mpath + ".uuid", absl::StrCat(Quote(m.uuid), " appears twice"));
      }
      if (!IsValidMigProfile(m.profile)) {
        return Invalid(mpath + ".profile",
                       absl::StrCat(Quote(m.profile), " is not a MIG profile like \"1g.5gb\""));
      }
      if (!starts.insert(m.placement_start).second) {
        return Invalid(mpath + ".placementStart",
                       absl::StrCat(m.placement_start, " is used by two MIG devices of this GPU"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Inventory> ParseInventoryJson(absl::string_view json) {
  if (json.size() > kMaxInventoryBytes) {
    return absl::InvalidArgumentError(absl::StrCat("inventory is ", json.size(),
                                                   " bytes, at most ", kMaxInventoryBytes));
  }
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonLimited(json, doc); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("inventory: ", s.message()));
  }
  if (!doc.IsObject()) return Invalid("inventory", "must be a JSON object with \"gpus\"");
  auto gpus_it = doc.FindMember("gpus");
  if (gpus_it == doc.MemberEnd()) return Invalid("gpus", "missing");
  if (!gpus_it->value.IsArray()) return Invalid("gpus", "must be an array");
  if (gpus_it->value.Size() > static_cast<rapidjson::SizeType>(kMaxGpus)) {
    return Invalid("gpus", absl::StrCat(gpus_it->value.Size(), " GPUs, at most ", kMaxGpus));
  }
  Inventory inv;
  for (rapidjson::SizeType i = 0; i < gpus_it->value.Size(); ++i) {
    auto g = DecodeGpu(gpus_it->value[i], absl::StrCat("gpus[", i, "]"));
    if (!g.ok()) return g.status();
    inv.gpus.push_back(*std::move(g));
  }
  if (absl::Status s = ValidateInventory(inv); !s.ok()) return s;
  SortInventory(inv);
  return inv;
}

absl::StatusOr<Inventory> LoadInventoryFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("inventory file ", path, ": cannot be read"));
  std::string text;
  char buf[8192];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxInventoryBytes) {
      return absl::InvalidArgumentError(absl::StrCat("inventory file ", path, ": larger than ",
                                                     kMaxInventoryBytes, " bytes"));
    }
  }
  auto inv = ParseInventoryJson(text);
  if (!inv.ok()) {
    return absl::Status(inv.status().code(),
                        absl::StrCat("inventory file ", path, ": ", inv.status().message()));
  }
  return inv;
}

std::string InventoryToJson(const Inventory& inventory) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("gpus");
  w.StartArray();
  for (const Gpu& g : inventory.gpus) {
    w.StartObject();
    w.Key("index");
    w.Int(g.index);
    w.Key("uuid");
    w.String(g.uuid.c_str(), static_cast<rapidjson::SizeType>(g.uuid.size()));
    w.Key("product");
    w.String(g.product.c_str(), static_cast<rapidjson::SizeType>(g.product.size()));
    w.Key("memoryMiB");
    w.Int64(g.memory_mib);
    w.Key("migEnabled");
    w.Bool(g.mig_enabled);
    w.Key("healthy");
    w.Bool(g.healthy);
    w.Key("migDevices");
    w.StartArray();
    for (const MigDevice& m : g.mig_devices) {
      w.StartObject();
      w.Key("uuid");
      w.String(m.uuid.c_str(), static_cast<rapidjson::SizeType>(m.uuid.size()));
      w.Key("profile");
      w.String(m.profile.c_str(), static_cast<rapidjson::SizeType>(m.profile.size()));
      w.Key("memoryMiB");
      w.Int64(m.memory_mib);
      w.Key("placementStart");
      w.Int(m.placement_start);
      w.Key("gpuInstanceId");
      w.Uint(m.gpu_instance_id);
      w.Key("healthy");
      w.Bool(m.healthy);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

std::string ProductLabel(absl::string_view nvml_name) {
  std::string out(nvml_name);
  std::replace(out.begin(), out.end(), ' ', '-');
  return out;
}

std::string MigProfileName(uint32_t gpu_instance_slices, uint64_t memory_mib) {
  return absl::StrCat(gpu_instance_slices, "g.", (memory_mib + 1023) / 1024, "gb");
}

}  // namespace gse::agent
