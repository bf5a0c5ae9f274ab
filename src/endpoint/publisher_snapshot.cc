// The publisher's snapshot (publisher.h): the bytes of the last published version, which
// every publication advances in place. After a restart on an existing journal it is rebuilt
// from the journal's head, verified, before the first delta is encoded against it. (After a
// publication that failed part way no rebuild is needed: the next version is an anchor.)
#include "codec/delta_manifest.h"
#include "src/endpoint/publisher.h"
#include "transport/fs/catch_up_reader.h"

namespace weightcast {

Status Publisher::rebuild_previous() {
  // The journal's head, rebuilt (and verified) from its anchor and deltas into the snapshot,
  // when its tensors are the registered ones; otherwise the next version is an anchor.
  // The catch-up reader writes every tensor; hooked ones have no snapshot to rebuild, so a
  // publisher with both kinds publishes an anchor first (docs/DECISIONS.md "Hooked mode").
  if (any_hooked()) return ok_status();
  const proto::StepManifest* manifest = writer_->head_manifest();
  if (manifest == nullptr || manifest->tensors_size() != static_cast<int>(tensors_.size())) {
    return ok_status();
  }
  std::vector<ReaderDestination> dest;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = manifest->tensors(static_cast<int>(i));
    auto dtype = dtype_from_proto(t.dtype());
    if (t.name() != tensors_[i].name || !dtype.ok() || *dtype != tensors_[i].dtype) {
      return ok_status();
    }
    dest.push_back({tensors_[i].name, tensors_[i].dtype, tensors_[i].shape, previous_[i]});
  }
  CatchUpReader reader(config_.journal_root(), std::move(dest), {pool_.get(), "", 0, options_.log});
  auto report = reader.catch_up(manifest->version());
  if (!report.ok()) {
    if (options_.log) {
      options_.log("publisher: cannot rebuild version " + std::to_string(manifest->version()) +
                   " from the journal (" + report.status().message() +
                   "); the next version is an anchor");
    }
    return ok_status();
  }
  have_previous_ = true;
  return ok_status();
}

}  // namespace weightcast
