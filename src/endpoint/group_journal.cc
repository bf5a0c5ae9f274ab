#include "src/endpoint/group_journal.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "src/control/layouts.h"

namespace weightcast {

Result<JournalOptions> group_journal_options(const proto::GroupConfig& config, ThreadPool* pool,
                                             ControlLog log) {
  JournalOptions journal;
  journal.root = config.journal_root();
  journal.anchor_every = config.anchor_every();
  journal.retention.keep_anchors = std::max<uint32_t>(1, config.retain_anchors());
  journal.pool = pool;
  journal.log = std::move(log);
  if (!config.layouts().empty()) {
    ASSIGN_OR_RETURN(LayoutRules rules, LayoutRules::compile(config));
    journal.declared_slices = [cache = std::make_shared<DeclaredSliceCache>(std::move(rules))](
                                  const std::string& name, const std::vector<int64_t>& shape) {
      return cache->get(name, shape);
    };
  }
  return journal;
}

}  // namespace weightcast
