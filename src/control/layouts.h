// Engine layouts (docs/CONFIG.md `layouts`): how an engine replica divides the model over its
// ranks, declared once in the group config so that the publisher knows, for every tensor,
// which slices engine ranks hold and can give each slice's checksum in every step's manifest
// (journal.proto SliceChecksum), and each engine rank knows its own slice of every tensor.
//
//   layouts:
//     - name: tp2
//       parts: 2
//       rules:                                   # first match wins; no match: held whole
//         - {match: '.*\.(q|k|v|gate|up)_proj\.weight', dim: 0}
//         - {match: '.*\.(o|down)_proj\.weight', dim: 1}
//   ranks:
//     - {rank: 2, role: subscriber, layout: tp2, part: 0, replica: engine0}
//
// A split cuts as torch.tensor_split does (the first extent % parts parts one longer).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/tensor_slice.h"
#include "src/control/yaml_field_reader.h"
#include "weightcast/group_config.pb.h"
#include "weightcast/journal.pb.h"

namespace weightcast {

// Parses the `layouts` section into cfg.layouts (names unique, parts >= 1, regexes valid).
Status parse_layouts_section(const YamlFieldReader& r, const YAML::Node& n, uint64_t max_entries,
                             proto::GroupConfig& cfg);
// A rank entry's `layout`, `part` and `replica` fields (`field` names the entry).
Status parse_rank_layout(const YamlFieldReader& r, const YAML::Node& entry,
                         const std::string& field, proto::RankConfig* rank);
// After the ranks: a rank naming a layout is a subscriber, the layout exists, its part is one
// of the layout's, and every replica of a layout has each part exactly once.
Status check_layout_ranks(const YamlFieldReader& r, const proto::GroupConfig& cfg);

// The config's layouts with their rules compiled.
class LayoutRules {
 public:
  static Result<LayoutRules> compile(const proto::GroupConfig& config);

  bool empty() const { return layouts_.empty(); }
  // The slice that part `part` of layout `layout` holds of tensor `tensor` (global `shape`):
  // whole when no rule matches or the rule says whole. Errors name the tensor, layout and rule.
  Result<TensorSlice> slice(const std::string& layout, const std::string& tensor,
                            const std::vector<int64_t>& shape, uint32_t part) const;
  // Whether layout `layout` cuts tensor `tensor` into slices (a rule splits it; shapes aside:
  // an extent shorter than the parts leaves some parts empty, which still add up).
  bool splits(const std::string& layout, const std::string& tensor) const;
  // Every distinct slice any part of any layout holds of the tensor, the whole tensor left
  // out (its checksum is the manifest's TensorState.checksum).
  Result<std::vector<TensorSlice>> declared_slices(const std::string& tensor,
                                                   const std::vector<int64_t>& shape) const;

 private:
  struct Rule {
    std::regex match;
    bool whole = false;
    uint32_t dim = 0;
  };
  struct Compiled {
    std::string name;
    uint32_t parts = 1;
    std::vector<Rule> rules;
  };
  std::vector<Compiled> layouts_;
};

// LayoutRules::declared_slices remembered by tensor name and shape: the rules are regexes,
// matched once per tensor rather than at every version. Safe from several threads.
class DeclaredSliceCache {
 public:
  explicit DeclaredSliceCache(LayoutRules rules) : rules_(std::move(rules)) {}
  Result<std::vector<TensorSlice>> get(const std::string& tensor,
                                       const std::vector<int64_t>& shape);

 private:
  LayoutRules rules_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::vector<int64_t>>, std::vector<TensorSlice>> known_;
};

}  // namespace weightcast
