// PublishedInventoryJson: the Node annotation's value.
#include "agent/published_inventory.h"

#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

namespace gse::agent {

std::string PublishedInventoryJson(const UnitMap& units, const DeviceHealth& health) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  auto str = [&w](absl::string_view s) {
    w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  };
  w.StartObject();
  w.Key("version");
  w.Int(kPublishedInventoryVersion);
  w.Key("resources");
  w.StartObject();
  for (const ServedOffering& o : units.offerings()) {
    str(o.resource());
    w.StartObject();
    w.Key("sharing");
    str(SharingName(o.sharing()));
    w.Key("replicas");
    w.Int(o.replicas());
    w.Key("units");
    w.StartArray();
    for (const UnitDevice& u : o.units()) {
      w.StartObject();
      w.Key("uuid");
      str(u.uuid);
      w.Key("gpu");
      w.Int(u.gpu_index);
      if (!u.mig_profile.empty()) {
        w.Key("profile");
        str(u.mig_profile);
        w.Key("placementStart");
        w.Int(u.placement_start);
      }
      w.Key("healthy");
      w.Bool(health.UnitHealthy(u));
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndObject();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace gse::agent
