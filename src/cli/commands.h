// The weightcast command line: each command group registers its subcommands on the app.
// A command's callback stores its exit status in `exit_code` (0 ok, 1 refused or failed).
#pragma once

#include <CLI/CLI.hpp>

#include "codec/base/status.h"

namespace weightcast::cli {

void register_version_command(CLI::App& app, int& exit_code);
void register_delta_commands(CLI::App& app, int& exit_code);
void register_bench_commands(CLI::App& app, int& exit_code);
void register_bench_group(CLI::App& bench, int& exit_code);  // under `bench`
void register_adapter_commands(CLI::App& app, int& exit_code);
void register_journal_commands(CLI::App& app, int& exit_code);
void register_journal_repair(CLI::App* journal, int& exit_code);  // under `journal`
void register_keys_command(CLI::App& app, int& exit_code);
void register_group_commands(CLI::App& app, int& exit_code);
void register_fp8_commands(CLI::App& app, int& exit_code);

// Prints "weightcast: error: <status>" to stderr and returns 1 (0 when ok).
int report(const Status& status);

}  // namespace weightcast::cli
