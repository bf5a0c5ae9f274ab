// weightcast: the command line. `weightcast --help` lists the commands.
#include <cstdio>

#include "src/cli/commands.h"

namespace weightcast::cli {

int report(const Status& status) {
  if (status.ok()) return 0;
  std::fprintf(stderr, "weightcast: error: %s\n", status.to_string().c_str());
  return 1;
}

}  // namespace weightcast::cli

int main(int argc, char** argv) {
  CLI::App app{"weightcast: carries an RL trainer's new weights to its inference engines"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");
  int exit_code = 0;
  weightcast::cli::register_version_command(app, exit_code);
  weightcast::cli::register_delta_commands(app, exit_code);
  weightcast::cli::register_adapter_commands(app, exit_code);
  weightcast::cli::register_journal_commands(app, exit_code);
  weightcast::cli::register_keys_command(app, exit_code);
  weightcast::cli::register_fp8_commands(app, exit_code);
  weightcast::cli::register_group_commands(app, exit_code);
  weightcast::cli::register_bench_commands(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
