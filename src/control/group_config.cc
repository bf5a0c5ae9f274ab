// The group config loader: YAML (yaml-cpp) validated field by field into proto::GroupConfig.
//
// yaml-cpp throws; every call into it happens under the one try block of parse_group_config,
// which turns YAML::Exception into a Status. Typed field reads (and their errors) are
// YamlFieldReader's; this file holds the schema and the cross-field validation.
#include "src/control/group_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <vector>

#include "codec/base/file_io.h"
#include "codec/fp8_selection.h"
#include "src/control/curve_keys.h"
#include "src/control/group_config_demo.h"
#include "src/control/group_config_nccl.h"
#include "src/control/layouts.h"
#include "src/control/yaml_field_reader.h"

namespace weightcast {
namespace {

constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();

using yaml_field::child;
using yaml_field::describe;
using yaml_field::indexed;
using yaml_field::quote;

bool valid_group_id(std::string_view id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

// tcp://host:port (host a name, IPv4, [IPv6], or '*' when binding) or ipc://path.
bool valid_endpoint(std::string_view e, bool bind) {
  if (e.starts_with("ipc://")) return e.size() > 6;
  if (!e.starts_with("tcp://")) return false;
  e.remove_prefix(6);
  const size_t colon = e.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  const std::string_view host = e.substr(0, colon), port = e.substr(colon + 1);
  uint32_t p = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || end != port.data() + port.size() || p == 0 || p > 65535) return false;
  if (host == "*") return bind;
  if (host.front() == '[') return host.size() > 2 && host.back() == ']';
  return std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

// The field reader with the group config's own limits (lists, ranks) at hand.
class Reader : public YamlFieldReader {
 public:
  Reader(std::string_view source, std::string_view base_dir, const GroupConfigLimits& limits)
      : YamlFieldReader(source, base_dir, {"GroupConfigLimits", limits.max_string_bytes}),
        limits_(limits) {}

  const GroupConfigLimits& limits() const { return limits_; }

 private:
  GroupConfigLimits limits_;
};

Status parse_coordinator(const Reader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  RETURN_IF_ERROR(r.mapping(n, "coordinator", {"endpoint", "bind"}));
  ASSIGN_OR_RETURN(std::string endpoint, r.str_field(n, "coordinator", "endpoint"));
  if (!valid_endpoint(endpoint, false)) {
    return r.fail("coordinator.endpoint",
                  quote(endpoint) + " is not tcp://host:port or ipc://path");
  }
  ASSIGN_OR_RETURN(std::string bind, r.str_field(n, "coordinator", "bind", endpoint));
  if (!valid_endpoint(bind, true)) {
    return r.fail("coordinator.bind", quote(bind) + " is not tcp://host:port or ipc://path");
  }
  cfg.set_coordinator_endpoint(endpoint);
  cfg.set_coordinator_bind(bind);
  return ok_status();
}

Status parse_journal(const Reader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  RETURN_IF_ERROR(r.mapping(n, "journal", {"root", "anchor_every", "retain_anchors"}));
  ASSIGN_OR_RETURN(std::string root, r.path_field(n, "journal", "root"));
  ASSIGN_OR_RETURN(uint64_t every, r.uint_field(n, "journal", "anchor_every", kDefaultAnchorEvery,
                                                0, kMaxAnchorEvery));
  ASSIGN_OR_RETURN(uint64_t retain, r.uint_field(n, "journal", "retain_anchors",
                                                 kDefaultRetainAnchors, 1, kMaxRetainAnchors));
  cfg.set_journal_root(root);
  cfg.set_anchor_every(every);
  cfg.set_retain_anchors(static_cast<uint32_t>(retain));
  return ok_status();
}

// `publisher: {snapshot: host}`: where snapshot mode keeps its copy of CUDA tensors.
Status parse_publisher(const Reader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  if (!n.IsDefined()) return ok_status();
  RETURN_IF_ERROR(r.mapping(n, "publisher", {"snapshot"}));
  ASSIGN_OR_RETURN(std::string where, r.str_field(n, "publisher", "snapshot", std::string("host")));
  if (where != "host" && where != "device") {
    return r.fail("publisher.snapshot", quote(where) + " is not host or device");
  }
  cfg.mutable_publisher()->set_snapshot(where);
  return ok_status();
}

// `fp8: {quantize: ['.*_proj\.weight$']}`: an FP8 group; present means enabled unless
// `enabled: false`. Patterns are compiled here so that a bad one fails every rank at start.
Status parse_fp8(const Reader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  if (!n.IsDefined()) return ok_status();
  RETURN_IF_ERROR(r.mapping(n, "fp8", {"enabled", "quantize"}));
  auto* f = cfg.mutable_fp8();
  f->set_enabled(true);
  if (n["enabled"].IsDefined()) {
    ASSIGN_OR_RETURN(bool enabled, r.boolean(n["enabled"], "fp8.enabled"));
    f->set_enabled(enabled);
  }
  const YAML::Node patterns = n["quantize"];
  if (!patterns.IsDefined()) return ok_status();
  RETURN_IF_ERROR(
      r.sequence(patterns, "fp8.quantize", r.limits().max_list_entries, "max_list_entries"));
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string field = indexed("fp8.quantize", i);
    ASSIGN_OR_RETURN(std::string pattern, r.str(patterns[i], field));
    if (auto compiled = Fp8Selection::compile({pattern}, field); !compiled.ok()) {
      return r.fail(field, quote(pattern) + " is not a valid regex");
    }
    f->add_quantize(pattern);
  }
  return ok_status();
}

Status parse_transports(const Reader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  if (!n.IsDefined()) {
    cfg.add_transports("fs");
    return ok_status();
  }
  RETURN_IF_ERROR(r.sequence(n, "transports", r.limits().max_list_entries, "max_list_entries"));
  if (n.size() == 0) return r.fail("transports", "must name at least one transport");
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string field = indexed("transports", i);
    ASSIGN_OR_RETURN(std::string name, r.str(n[i], field));
    if (name != "fs" && name != "ucx" && name != "nccl") {
      return r.fail(field, "unknown transport " + quote(name) + " (allowed: fs, ucx, nccl)");
    }
    if (std::find(cfg.transports().begin(), cfg.transports().end(), name) !=
        cfg.transports().end()) {
      return r.fail(field, "transport " + quote(name) + " is listed twice");
    }
    cfg.add_transports(name);
  }
  return ok_status();
}

// `ucx: {tls: "shm,tcp", publisher_memory: auto}`: the UCX_TLS value the UCX transport uses
// (UCX's own syntax: names, commas, a leading ^ to exclude, aliases such as shm or cuda;
// absent: UCX chooses) and where the publisher serves from (auto, in_place or copy).
Status parse_ucx(const Reader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  if (!n.IsDefined()) return ok_status();
  RETURN_IF_ERROR(r.mapping(n, "ucx", {"tls", "publisher_memory"}));
  ASSIGN_OR_RETURN(std::string tls, r.str_field(n, "ucx", "tls", std::string()));
  for (char c : tls) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ',' && c != '^' &&
        c != ':') {
      return r.fail("ucx.tls", quote(tls) + " is not a UCX_TLS list (names, commas, a leading ^)");
    }
  }
  cfg.mutable_ucx()->set_tls(tls);
  ASSIGN_OR_RETURN(std::string memory,
                   r.str_field(n, "ucx", "publisher_memory", std::string("auto")));
  if (memory != "auto" && memory != "in_place" && memory != "copy") {
    return r.fail("ucx.publisher_memory", quote(memory) + " is not auto, in_place or copy");
  }
  cfg.mutable_ucx()->set_publisher_memory(memory);
  return ok_status();
}

Status parse_timeouts(const Reader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  const YAML::Node m = n.IsDefined() ? n : YAML::Node(YAML::NodeType::Map);
  RETURN_IF_ERROR(r.mapping(m, "timeouts",
                            {"heartbeat_ms", "dead_after_ms", "ack_timeout_ms", "lease_ttl_ms"}));
  const std::string t = "timeouts";
  ASSIGN_OR_RETURN(uint64_t hb,
                   r.uint_field(m, t, "heartbeat_ms", kDefaultHeartbeatMs, 1, kMaxTimeoutMs));
  ASSIGN_OR_RETURN(uint64_t dead,
                   r.uint_field(m, t, "dead_after_ms", kDefaultDeadAfterMs, 1, kMaxTimeoutMs));
  ASSIGN_OR_RETURN(uint64_t ack,
                   r.uint_field(m, t, "ack_timeout_ms", kDefaultAckTimeoutMs, 1, kMaxTimeoutMs));
  ASSIGN_OR_RETURN(uint64_t lease,
                   r.uint_field(m, t, "lease_ttl_ms", kDefaultLeaseTtlMs, 1, kMaxTimeoutMs));
  if (dead <= 2 * hb) {
    return r.fail("timeouts.dead_after_ms",
                  std::to_string(dead) + " must exceed 2 * heartbeat_ms (" +
                      std::to_string(2 * hb) + "), or one late heartbeat drops a live rank");
  }
  auto* out = cfg.mutable_timeouts();
  out->set_heartbeat_ms(static_cast<uint32_t>(hb));
  out->set_dead_after_ms(static_cast<uint32_t>(dead));
  out->set_ack_timeout_ms(static_cast<uint32_t>(ack));
  out->set_lease_ttl_ms(static_cast<uint32_t>(lease));
  return ok_status();
}

Result<std::string> z85_field(const Reader& r, const YAML::Node& n, const std::string& field) {
  ASSIGN_OR_RETURN(std::string key, r.str(n, field));
  if (!is_z85_key(key)) return r.fail(field, describe(n) + " is not a 40-character Z85 key");
  return key;
}

// The curve section is optional; when present, `enabled` defaults to true (a section that names
// keys means the operator wants them used). Keys given are checked even when disabled.
Status parse_curve(const Reader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  if (!n.IsDefined()) return ok_status();
  RETURN_IF_ERROR(r.mapping(n, "curve",
                            {"enabled", "coordinator_public_key", "coordinator_key_file",
                             "authorized_keys", "observer_key_file"}));
  auto* c = cfg.mutable_curve();
  if (n["enabled"].IsDefined()) {
    ASSIGN_OR_RETURN(bool enabled, r.boolean(n["enabled"], "curve.enabled"));
    c->set_enabled(enabled);
  } else {
    c->set_enabled(true);
  }
  if (n["coordinator_public_key"].IsDefined()) {
    ASSIGN_OR_RETURN(*c->mutable_coordinator_public_key(),
                     z85_field(r, n["coordinator_public_key"], "curve.coordinator_public_key"));
  } else if (c->enabled()) {
    return r.missing("curve", "coordinator_public_key");
  }
  if (n["coordinator_key_file"].IsDefined() || c->enabled()) {
    ASSIGN_OR_RETURN(*c->mutable_coordinator_key_file(),
                     r.path_field(n, "curve", "coordinator_key_file"));
  }
  if (n["observer_key_file"].IsDefined()) {
    ASSIGN_OR_RETURN(*c->mutable_observer_key_file(),
                     r.path_field(n, "curve", "observer_key_file"));
  }
  const YAML::Node keys = n["authorized_keys"];
  if (keys.IsDefined()) {
    RETURN_IF_ERROR(
        r.sequence(keys, "curve.authorized_keys", r.limits().max_list_entries, "max_list_entries"));
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSIGN_OR_RETURN(*c->add_authorized_keys(),
                       z85_field(r, keys[i], indexed("curve.authorized_keys", i)));
    }
  }
  return ok_status();
}

Result<proto::Role> parse_role(const Reader& r, const YAML::Node& n, const std::string& field) {
  ASSIGN_OR_RETURN(std::string name, r.str(n, field));
  if (name == "coordinator") return proto::ROLE_COORDINATOR;
  if (name == "publisher") return proto::ROLE_PUBLISHER;
  if (name == "subscriber") return proto::ROLE_SUBSCRIBER;
  return r.fail(field, describe(n) + " is not a rank role (coordinator, publisher, subscriber)");
}

Status parse_ranks(const Reader& r, const YAML::Node& n, proto::GroupConfig& cfg) {
  if (!n.IsDefined()) return r.missing("", "ranks");
  RETURN_IF_ERROR(r.sequence(n, "ranks", r.limits().max_ranks, "max_ranks"));
  if (n.size() == 0) return r.fail("ranks", "must list at least one rank");
  const bool curve = cfg.curve().enabled();
  std::set<uint32_t> seen;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string f = indexed("ranks", i);
    const YAML::Node e = n[i];
    RETURN_IF_ERROR(r.mapping(
        e, f, {"rank", "role", "host", "key_file", "public_key", "layout", "part", "replica"}));
    auto* rank = cfg.add_ranks();
    ASSIGN_OR_RETURN(uint64_t id, r.uint_field(e, f, "rank", std::nullopt, 0, kU32Max));
    if (!seen.insert(static_cast<uint32_t>(id)).second) {
      return r.fail(child(f, "rank"), "rank " + std::to_string(id) + " is listed twice");
    }
    rank->set_rank(static_cast<uint32_t>(id));
    if (!e["role"].IsDefined()) return r.missing(f, "role");
    ASSIGN_OR_RETURN(proto::Role role, parse_role(r, e["role"], child(f, "role")));
    rank->set_role(role);
    if (e["host"].IsDefined()) {
      ASSIGN_OR_RETURN(*rank->mutable_host(), r.str(e["host"], child(f, "host")));
    }
    RETURN_IF_ERROR(parse_rank_layout(r, e, f, rank));
    if (e["key_file"].IsDefined() || curve) {
      ASSIGN_OR_RETURN(*rank->mutable_key_file(), r.path_field(e, f, "key_file"));
    }
    if (e["public_key"].IsDefined()) {
      ASSIGN_OR_RETURN(*rank->mutable_public_key(),
                       z85_field(r, e["public_key"], child(f, "public_key")));
    } else if (curve) {
      return r.missing(f, "public_key");
    }
  }
  const auto count = [&](proto::Role role) {
    return std::count_if(cfg.ranks().begin(), cfg.ranks().end(),
                         [role](const proto::RankConfig& k) { return k.role() == role; });
  };
  if (count(proto::ROLE_COORDINATOR) != 1) {
    return r.fail("ranks", "needs exactly one coordinator rank, found " +
                               std::to_string(count(proto::ROLE_COORDINATOR)));
  }
  if (count(proto::ROLE_PUBLISHER) < 1) return r.fail("ranks", "needs a publisher rank");
  return ok_status();
}

Result<proto::GroupConfig> parse_root(const Reader& r, const YAML::Node& root) {
  RETURN_IF_ERROR(
      r.mapping(root, "",
                {"group_id", "coordinator", "journal", "transports", "max_in_flight", "timeouts",
                 "curve", "ranks", "demo", "ucx", "nccl", "publisher", "fp8", "layouts"}));
  proto::GroupConfig cfg;
  ASSIGN_OR_RETURN(*cfg.mutable_group_id(), r.str_field(root, "", "group_id"));
  if (!valid_group_id(cfg.group_id())) {
    return r.fail("group_id", quote(cfg.group_id()) + " must match [A-Za-z0-9._-]+");
  }
  if (!root["coordinator"].IsDefined()) return r.missing("", "coordinator");
  RETURN_IF_ERROR(parse_coordinator(r, root["coordinator"], cfg));
  if (!root["journal"].IsDefined()) return r.missing("", "journal");
  RETURN_IF_ERROR(parse_journal(r, root["journal"], cfg));
  RETURN_IF_ERROR(parse_transports(r, root["transports"], cfg));
  RETURN_IF_ERROR(parse_ucx(r, root["ucx"], cfg));
  RETURN_IF_ERROR(parse_publisher(r, root["publisher"], cfg));
  RETURN_IF_ERROR(parse_fp8(r, root["fp8"], cfg));
  RETURN_IF_ERROR(parse_nccl_section(r, root["nccl"], cfg));
  ASSIGN_OR_RETURN(uint64_t in_flight,
                   r.uint_field(root, "", "max_in_flight", kDefaultMaxInFlight, 1, kMaxInFlight));
  cfg.set_max_in_flight(static_cast<uint32_t>(in_flight));
  RETURN_IF_ERROR(parse_timeouts(r, root["timeouts"], cfg));
  RETURN_IF_ERROR(parse_curve(r, root["curve"], cfg));
  RETURN_IF_ERROR(parse_layouts_section(r, root["layouts"], r.limits().max_list_entries, cfg));
  RETURN_IF_ERROR(parse_ranks(r, root["ranks"], cfg));
  RETURN_IF_ERROR(check_layout_ranks(r, cfg));
  RETURN_IF_ERROR(parse_demo_section(r, root["demo"], cfg));
  return cfg;
}

}  // namespace

Result<proto::GroupConfig> parse_group_config(std::string_view yaml_text, std::string_view source,
                                              std::string_view base_dir,
                                              const GroupConfigLimits& limits) {
  const std::string name = source.empty() ? std::string("<group config>") : std::string(source);
  if (yaml_text.size() > limits.max_file_bytes) {
    return out_of_range(name + ": " + std::to_string(yaml_text.size()) +
                        " bytes exceed GroupConfigLimits::max_file_bytes (" +
                        std::to_string(limits.max_file_bytes) + ")");
  }
  const Reader reader(name, base_dir, limits);
  try {
    return parse_root(reader, YAML::Load(std::string(yaml_text)));
  } catch (const YAML::Exception& e) {
    std::string what = e.msg.empty() ? std::string("invalid YAML") : e.msg;
    if (!e.mark.is_null()) {
      what = "line " + std::to_string(e.mark.line + 1) + ", column " +
             std::to_string(e.mark.column + 1) + ": " + what;
    }
    return invalid_argument(name + ": " + what);
  }
}

Result<proto::GroupConfig> load_group_config(const std::string& path,
                                             const GroupConfigLimits& limits) {
  ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, read_whole_file(path, limits.max_file_bytes));
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) abs = path;
  const std::string dir = abs.parent_path().string();
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return parse_group_config(text, path, dir.empty() ? std::string(".") : dir, limits);
}

Result<proto::RankConfig> find_rank(const proto::GroupConfig& config, uint32_t rank) {
  std::string known;
  int listed = 0;
  for (const auto& r : config.ranks()) {
    if (r.rank() == rank) return r;
    if (listed++ < 32) known += (known.empty() ? "" : ", ") + std::to_string(r.rank());
  }
  if (listed > 32) known += ", ...";
  return not_found("rank " + std::to_string(rank) + " is not in group '" + config.group_id() +
                   "' (its ranks: " + (known.empty() ? std::string("none") : known) + ")");
}

bool ucx_live_serves_copies(const std::string& publisher_memory) {
  if (publisher_memory == "copy") return true;
  if (publisher_memory == "in_place") return false;
  std::error_code ec;
  const std::filesystem::path rdma("/sys/class/infiniband");
  return !std::filesystem::is_directory(rdma, ec) ||
         std::filesystem::directory_iterator(rdma, ec) == std::filesystem::directory_iterator();
}

}  // namespace weightcast
