#include "src/control/layouts.h"

#include <algorithm>
#include <map>
#include <set>

namespace weightcast {

using yaml_field::child;
using yaml_field::indexed;
using yaml_field::quote;

Status parse_layouts_section(const YamlFieldReader& r, const YAML::Node& n, uint64_t max_entries,
                             proto::GroupConfig& cfg) {
  if (!n.IsDefined()) return ok_status();
  RETURN_IF_ERROR(r.sequence(n, "layouts", max_entries, "max_list_entries"));
  std::set<std::string> names;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string f = indexed("layouts", i);
    RETURN_IF_ERROR(r.mapping(n[i], f, {"name", "parts", "rules"}));
    auto* layout = cfg.add_layouts();
    ASSIGN_OR_RETURN(*layout->mutable_name(), r.str_field(n[i], f, "name"));
    if (!names.insert(layout->name()).second) {
      return r.fail(child(f, "name"), "layout " + quote(layout->name()) + " is declared twice");
    }
    ASSIGN_OR_RETURN(uint64_t parts, r.uint_field(n[i], f, "parts", std::nullopt, 1, 4096));
    layout->set_parts(static_cast<uint32_t>(parts));
    const YAML::Node rules = n[i]["rules"];
    if (!rules.IsDefined()) continue;
    RETURN_IF_ERROR(r.sequence(rules, child(f, "rules"), max_entries, "max_list_entries"));
    for (size_t k = 0; k < rules.size(); ++k) {
      const std::string rf = indexed(child(f, "rules"), k);
      RETURN_IF_ERROR(r.mapping(rules[k], rf, {"match", "dim", "whole"}));
      auto* rule = layout->add_rules();
      ASSIGN_OR_RETURN(*rule->mutable_match(), r.str_field(rules[k], rf, "match"));
      try {
        (void)std::regex(rule->match(), std::regex::ECMAScript);
      } catch (const std::regex_error&) {
        return r.fail(child(rf, "match"), quote(rule->match()) + " is not a valid regex");
      }
      const bool has_dim = rules[k]["dim"].IsDefined();
      bool whole = false;
      if (rules[k]["whole"].IsDefined()) {
        ASSIGN_OR_RETURN(whole, r.boolean(rules[k]["whole"], child(rf, "whole")));
      }
      if (has_dim == whole) {
        return r.fail(rf, "needs either dim (the dimension to split) or whole: true");
      }
      rule->set_whole(whole);
      if (has_dim) {
        ASSIGN_OR_RETURN(uint64_t dim, r.uint_field(rules[k], rf, "dim", std::nullopt, 0, 63));
        rule->set_dim(static_cast<uint32_t>(dim));
      }
    }
  }
  return ok_status();
}

Status parse_rank_layout(const YamlFieldReader& r, const YAML::Node& e, const std::string& f,
                         proto::RankConfig* rank) {
  if (e["layout"].IsDefined()) {
    ASSIGN_OR_RETURN(*rank->mutable_layout(), r.str(e["layout"], child(f, "layout")));
  }
  ASSIGN_OR_RETURN(uint64_t part, r.uint_field(e, f, "part", 0, 0, UINT32_MAX));
  rank->set_part(static_cast<uint32_t>(part));
  if (e["replica"].IsDefined()) {
    ASSIGN_OR_RETURN(*rank->mutable_replica(), r.str(e["replica"], child(f, "replica")));
  }
  return ok_status();
}

Status check_layout_ranks(const YamlFieldReader& r, const proto::GroupConfig& cfg) {
  std::map<std::string, uint32_t> parts;
  for (const auto& l : cfg.layouts()) parts[l.name()] = l.parts();
  // (layout, replica) -> part -> rank
  std::map<std::pair<std::string, std::string>, std::map<uint32_t, uint32_t>> replicas;
  for (int i = 0; i < cfg.ranks_size(); ++i) {
    const auto& k = cfg.ranks(i);
    const std::string f = indexed("ranks", static_cast<size_t>(i));
    if (k.layout().empty()) {
      if (k.part() != 0 || !k.replica().empty()) {
        return r.fail(f, "part and replica need a layout");
      }
      continue;
    }
    if (k.role() != proto::ROLE_SUBSCRIBER) {
      return r.fail(child(f, "layout"), "only subscriber ranks hold a layout's slices");
    }
    const auto it = parts.find(k.layout());
    if (it == parts.end()) {
      return r.fail(child(f, "layout"), quote(k.layout()) + " is not one of the layouts");
    }
    if (k.part() >= it->second) {
      return r.fail(child(f, "part"), std::to_string(k.part()) + " is not a part of layout " +
                                          quote(k.layout()) + " (it has " +
                                          std::to_string(it->second) + ")");
    }
    auto& held = replicas[{k.layout(), k.replica()}];
    if (const auto twice = held.find(k.part()); twice != held.end()) {
      return r.fail(child(f, "part"),
                    "replica " + quote(k.replica()) + " of layout " + quote(k.layout()) +
                        " has part " + std::to_string(k.part()) + " twice (ranks " +
                        std::to_string(twice->second) + " and " + std::to_string(k.rank()) + ")");
    }
    held[k.part()] = k.rank();
  }
  for (const auto& [key, held] : replicas) {
    const uint32_t want = parts[key.first];
    for (uint32_t p = 0; p < want; ++p) {
      if (!held.count(p)) {
        return r.fail("ranks", "replica " + quote(key.second) + " of layout " + quote(key.first) +
                                   " has no rank for part " + std::to_string(p) + " of " +
                                   std::to_string(want));
      }
    }
  }
  return ok_status();
}

Result<LayoutRules> LayoutRules::compile(const proto::GroupConfig& config) {
  LayoutRules out;
  for (const auto& l : config.layouts()) {
    Compiled c;
    c.name = l.name();
    c.parts = std::max<uint32_t>(1, l.parts());
    for (const auto& rule : l.rules()) {
      try {
        c.rules.push_back(
            {std::regex(rule.match(), std::regex::ECMAScript), rule.whole(), rule.dim()});
      } catch (const std::regex_error&) {
        return invalid_argument("layout '" + l.name() + "': rule '" + rule.match() +
                                "' is not a valid regex");
      }
    }
    out.layouts_.push_back(std::move(c));
  }
  return out;
}

Result<TensorSlice> LayoutRules::slice(const std::string& layout, const std::string& tensor,
                                       const std::vector<int64_t>& shape, uint32_t part) const {
  for (const Compiled& c : layouts_) {
    if (c.name != layout) continue;
    if (part >= c.parts) {
      return invalid_argument("layout '" + layout + "' has no part " + std::to_string(part));
    }
    for (size_t k = 0; k < c.rules.size(); ++k) {
      const Rule& rule = c.rules[k];
      if (!std::regex_match(tensor, rule.match)) continue;
      if (rule.whole) break;
      if (rule.dim >= shape.size()) {
        return invalid_argument("tensor '" + tensor + "' has " + std::to_string(shape.size()) +
                                " dimensions; rule " + std::to_string(k) + " of layout '" + layout +
                                "' splits dimension " + std::to_string(rule.dim));
      }
      return TensorSlice::split(shape, rule.dim, c.parts, part);
    }
    return TensorSlice::whole(shape);
  }
  return not_found("no layout '" + layout + "' in the group config");
}

bool LayoutRules::splits(const std::string& layout, const std::string& tensor) const {
  for (const Compiled& c : layouts_) {
    if (c.name != layout) continue;
    for (const Rule& rule : c.rules) {
      if (std::regex_match(tensor, rule.match)) return !rule.whole;
    }
  }
  return false;
}

Result<std::vector<TensorSlice>> LayoutRules::declared_slices(
    const std::string& tensor, const std::vector<int64_t>& shape) const {
  std::vector<TensorSlice> out;
  const TensorSlice whole = TensorSlice::whole(shape);
  for (const Compiled& c : layouts_) {
    for (uint32_t p = 0; p < c.parts; ++p) {
      ASSIGN_OR_RETURN(TensorSlice s, slice(c.name, tensor, shape, p));
      if (s == whole || std::find(out.begin(), out.end(), s) != out.end()) continue;
      out.push_back(std::move(s));
    }
  }
  return out;
}

Result<std::vector<TensorSlice>> DeclaredSliceCache::get(const std::string& tensor,
                                                         const std::vector<int64_t>& shape) {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(tensor, shape);
  if (const auto it = known_.find(key); it != known_.end()) return it->second;
  ASSIGN_OR_RETURN(std::vector<TensorSlice> slices, rules_.declared_slices(tensor, shape));
  known_.emplace(std::move(key), slices);
  return slices;
}

}  // namespace weightcast
