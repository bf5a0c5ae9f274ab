#include <cstdio>

#include "codec/delta_format.h"
#include "src/cli/commands.h"
#include "weightcast/config.h"

namespace weightcast::cli {

void register_version_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("version", "Print the version, build options and formats");
  cmd->callback([&exit_code] {
    std::printf("weightcast %s (%s)\n", WEIGHTCAST_VERSION_STRING, WEIGHTCAST_GIT_REVISION);
    std::printf("delta format: %u\n", static_cast<unsigned>(kDeltaFormatVersion));
    std::printf("built with: cuda=%d nccl=%d ucx=%d torch=%d\n", WEIGHTCAST_HAVE_CUDA,
                WEIGHTCAST_HAVE_NCCL, WEIGHTCAST_HAVE_UCX, WEIGHTCAST_HAVE_TORCH);
    exit_code = 0;
  });
}

}  // namespace weightcast::cli
