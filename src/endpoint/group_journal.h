// The journal options every publisher of a group writes with, from the group's config
// (docs/CONFIG.md): the root, anchor cadence and retention, and the engine layouts' declared
// slices, whose checksums every manifest carries (docs/DECISIONS.md "Sharded tensors").
#pragma once

#include "codec/base/status.h"
#include "codec/base/thread_pool.h"
#include "src/control/zmq_channel.h"
#include "transport/fs/journal_writer.h"
#include "weightcast/group_config.pb.h"

namespace weightcast {

// `pool` (may be null: one thread) must outlive the writer the options open.
Result<JournalOptions> group_journal_options(const proto::GroupConfig& config, ThreadPool* pool,
                                             ControlLog log);

}  // namespace weightcast
