// CURVE key pairs for the control plane's authentication (ZeroMQ CURVE, Z85 text keys).
//
// A key file holds one pair as two lines, "public-key = <Z85>" and "secret-key = <Z85>",
// after optional '#' comment lines; it is written with mode 0600. `weightcast keys` makes
// them; the group config names each rank's file and lists the public keys it authorizes.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "codec/base/status.h"

namespace weightcast {

struct CurveKeyPair {
  std::string public_z85;  // 40 characters
  std::string secret_z85;  // 40 characters
};

// True when `key` is 40 characters of the Z85 alphabet that decode to 32 bytes.
bool is_z85_key(std::string_view key);

// A fresh pair from libzmq (libsodium); fails when libzmq was built without CURVE.
Result<CurveKeyPair> generate_curve_key_pair();

// Writes `pair` to `path` (mode 0600, temp file + rename); refuses to replace an existing
// file unless `overwrite`.
Status write_curve_key_file(const std::string& path, const CurveKeyPair& pair,
                            bool overwrite = false);

// Receives a warning about a key file that is used anyway.
using KeyFileWarning = std::function<void(const std::string&)>;

// Reads a key file; errors name the path and the line at fault. Checks that the public key
// is the one derived from the secret key.
//
// A key file whose mode gives group or others any access (mode & 077) is used, with a warning
// naming the file, its mode and the fix (key_file_mode_warning): refusing it would break
// Kubernetes, which mounts secrets 0644 unless told otherwise. The warning goes to `warn`, or,
// when that is null, to stderr once per path per process.
Result<CurveKeyPair> read_curve_key_file(const std::string& path,
                                         const KeyFileWarning& warn = nullptr);

// The warning for key file `path` of mode `mode` (st_mode), or "" when only its owner has
// access.
std::string key_file_mode_warning(const std::string& path, unsigned mode);

// The same checks on a key file's text; `source` names it in errors.
Result<CurveKeyPair> parse_curve_key_text(std::string_view text, const std::string& source);

}  // namespace weightcast
