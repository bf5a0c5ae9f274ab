// `weightcast keys`: makes a CURVE key pair for the control plane (src/control/curve_keys.h).
#include <cstdio>
#include <memory>
#include <string>

#include "src/cli/commands.h"
#include "src/control/curve_keys.h"

namespace weightcast::cli {

void register_keys_command(CLI::App& app, int& exit_code) {
  auto out = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "keys",
      "Generate a CURVE key pair for the control plane. With --out, write it as a key file "
      "(mode 0600) and print only its 'public-key = <Z85>' line, to paste into the group "
      "config (ranks[].public_key, curve.coordinator_public_key or curve.authorized_keys); "
      "without --out, print both lines to stdout");
  cmd->add_option("--out", *out, "Key file to write (refuses to replace an existing file)");
  cmd->add_flag("--force", *force, "With --out: replace an existing key file");
  cmd->callback([out, force, &exit_code] {
    if (*force && out->empty()) {
      exit_code = report(invalid_argument("--force needs --out"));
      return;
    }
    auto pair = generate_curve_key_pair();
    if (!pair.ok()) {
      exit_code = report(pair.status());
      return;
    }
    if (!out->empty()) {
      exit_code = report(write_curve_key_file(*out, *pair, *force));
      if (exit_code != 0) return;
    } else {
      std::printf("# weightcast CURVE key pair; keep the secret key private\n");
    }
    std::printf("public-key = %s\n", pair->public_z85.c_str());
    if (out->empty()) std::printf("secret-key = %s\n", pair->secret_z85.c_str());
    exit_code = 0;
  });
}

}  // namespace weightcast::cli
