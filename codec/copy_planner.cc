#include "codec/copy_planner.h"

namespace weightcast {
namespace {

bool same_kind(const CopyRequest& a, const CopyRequest& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

// A run candidate: requests [first, end) of one source, consecutive in the list.
struct Run {
  size_t first, end;
};

// Why the run [first, end) of one source cannot be one transfer, or kMerged if it can.
MergeDecision judge_run(std::span<const CopyRequest> r, Run run, bool source_seen_elsewhere) {
  if (source_seen_elsewhere) return MergeDecision::kInterleaved;
  if (run.end - run.first == 1) return MergeDecision::kSingle;
  uint64_t next = r[run.first].offset;
  for (size_t i = run.first; i < run.end; ++i) {
    if (!same_kind(r[i], r[run.first])) return MergeDecision::kShapeMismatch;
    if (r[i].offset != next) {
      return r[i].offset < next ? MergeDecision::kReordered : MergeDecision::kIncomplete;
    }
    next = r[i].offset + r[i].bytes;
  }
  if (r[run.first].offset != 0 || next != r[run.first].source_bytes)
    return MergeDecision::kIncomplete;
  return MergeDecision::kMerged;
}

void add_single(std::span<const CopyRequest> r, size_t i, MergeDecision why, CopyPlan* plan) {
  plan->slices[i] = {static_cast<uint32_t>(plan->transfers.size()), 0, why};
  plan->transfers.push_back({r[i].source, r[i].offset, r[i].bytes, {static_cast<uint32_t>(i)}});
}

}  // namespace

const char* merge_decision_name(MergeDecision d) {
  switch (d) {
    case MergeDecision::kMerged:
      return "merged";
    case MergeDecision::kIncomplete:
      return "incomplete";
    case MergeDecision::kReordered:
      return "reordered";
    case MergeDecision::kInterleaved:
      return "interleaved";
    case MergeDecision::kShapeMismatch:
      return "shape-mismatch";
    case MergeDecision::kSingle:
      return "single";
  }
  return "unknown";
}

CopyPlan plan_copies(std::span<const CopyRequest> r) {
  CopyPlan plan;
  plan.slices.resize(r.size());
  // Split the list into maximal runs of one source; a source with more than one run is
  // interleaved with another.
  std::vector<Run> runs;
  std::vector<uint32_t> runs_of_source;
  for (size_t i = 0; i < r.size(); ++i) {
    if (runs.empty() || r[i].source != r[runs.back().first].source)
      runs.push_back({i, i + 1});
    else
      runs.back().end = i + 1;
    if (r[i].source >= runs_of_source.size()) runs_of_source.resize(r[i].source + 1, 0);
  }
  for (const Run& run : runs) ++runs_of_source[r[run.first].source];
  for (const Run& run : runs) {
    const MergeDecision d = judge_run(r, run, runs_of_source[r[run.first].source] > 1);
    if (d != MergeDecision::kMerged) {
      for (size_t i = run.first; i < run.end; ++i) add_single(r, i, d, &plan);
      continue;
    }
    PlannedTransfer t{r[run.first].source, 0, r[run.first].source_bytes, {}};
    const auto index = static_cast<uint32_t>(plan.transfers.size());
    for (size_t i = run.first; i < run.end; ++i) {
      plan.slices[i] = {index, r[i].offset, MergeDecision::kMerged};
      t.requests.push_back(static_cast<uint32_t>(i));
    }
    plan.transfers.push_back(std::move(t));
  }
  for (const auto& t : plan.transfers) plan.total_bytes += t.bytes;
  return plan;
}

CopyPlan plan_per_slice(std::span<const CopyRequest> r) {
  CopyPlan plan;
  plan.slices.resize(r.size());
  for (size_t i = 0; i < r.size(); ++i) add_single(r, i, MergeDecision::kSingle, &plan);
  for (const auto& t : plan.transfers) plan.total_bytes += t.bytes;
  return plan;
}

}  // namespace weightcast
