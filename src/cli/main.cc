// weightcast: the command line. `weightcast --help` lists the commands. Exit codes: 0 done,
// 1 the command failed (the message says why), 2 a bad command line.
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; any other parse error is a bad command line and exits 2, as weightcastd
    // does (CLI11's own codes, 105 and up, would read as a command that ran and failed).
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}
