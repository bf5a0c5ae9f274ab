#include "src/packed_expert_export.h"

namespace weightcast {

Result<ExpertExport> export_packed_experts(std::span<const PackedParameter> params,
                                           std::span<const uint32_t> experts, bool coalesce,
                                           ThreadPool* pool, StagingPool* staging) {
  std::vector<CopyRequest> requests;
  std::vector<const uint8_t*> sources;
  static constexpr const char* kStates[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
  for (int state = 0; state < 3; ++state) {
    for (const PackedParameter& p : params) {
      const std::string who = "packed parameter '" + p.prefix + "." + p.suffix + "'";
      if (p.shape.empty() || p.shape[0] <= 0)
        return invalid_argument(who + ": needs a leading expert dimension");
      ASSIGN_OR_RETURN(const uint64_t numel, shape_numel(p.shape, who));
      const uint64_t total = numel * dtype_size(p.dtype);
      const std::span<const uint8_t> bytes = state == 0   ? p.master
                                             : state == 1 ? p.exp_avg
                                                          : p.exp_avg_sq;
      if (bytes.size() != total) {
        return invalid_argument(who + ": " + std::to_string(bytes.size()) + " bytes for state " +
                                std::to_string(state) + ", the shape needs " +
                                std::to_string(total));
      }
      const auto n_experts = static_cast<uint32_t>(p.shape[0]);
      const uint64_t per_expert = total / n_experts;
      const std::vector<int64_t> expert_shape(p.shape.begin() + 1, p.shape.end());
      const auto source = static_cast<uint32_t>(sources.size());
      sources.push_back(bytes.data());
      auto add = [&](uint32_t e) {
        requests.push_back(
            {std::string(kStates[state]) + p.prefix + "." + std::to_string(e) + "." + p.suffix,
             source, total, e * per_expert, per_expert, p.dtype, expert_shape});
      };
      if (experts.empty()) {
        for (uint32_t e = 0; e < n_experts; ++e) add(e);
      } else {
        for (uint32_t e : experts) {
          if (e >= n_experts) return invalid_argument(who + ": no expert " + std::to_string(e));
          add(e);
        }
      }
    }
  }
  ExpertExport out;
  out.plan = coalesce ? plan_copies(requests) : plan_per_slice(requests);
  ASSIGN_OR_RETURN(out.staged,
                   execute_copy_plan(out.plan, requests, sources, pool, nullptr, staging));
  out.tensors.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    out.tensors.push_back(
        {requests[i].name, requests[i].dtype, requests[i].shape, out.staged.slice(i)});
  }
  return out;
}

}  // namespace weightcast
