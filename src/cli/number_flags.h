// Range checks of numeric command-line flags, shared by weightcast, weightcastd and the
// example programs, so that every number a user types is refused the same way.
//
// Contract: an option checked with `->check(number_in<T>(min, max))` accepts only a plain
// decimal number of T's kind lying in [min, max]:
//   - an integer type takes digits only (a leading '-' only when T is signed): no '+', no
//     spaces, no base prefix ("0x10"), no exponent ("1e3"), no fraction ("1.5");
//   - a floating type takes a finite decimal ("0.01", "1e-3"), never "nan" or "inf".
// Anything else is refused before CLI11 converts the text, with "<value> is not <kind> in
// [min, max]"; CLI11 prefixes the flag's name ("--version: ...") and the command exits
// nonzero. Why not CLI::Range or CLI::NonNegativeNumber alone: CLI11 2.1 converts unsigned
// values with strtoull, which turns "-1" into 2^64-1 ("-1" for `--version` used to be stored
// as 18446744073709551615), and Range converts the text the same way before comparing.
//
// The bounds below are the ones several commands share; docs/CONFIG.md lists them with the
// config fields of the same meaning.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>

namespace weightcast::cli {

// Versions are stored as uint64 but stay below 2^63 so that `version + n` for any count a
// command takes cannot wrap, and so that a version fits every signed 64-bit consumer.
inline constexpr uint64_t kMaxVersion = (uint64_t{1} << 63) - 1;
// Worker threads of one command (0 is accepted only where a flag says "0: all cores").
inline constexpr size_t kMaxThreads = 1024;
// A wait a user can ask for: at most a day (as the config's timeouts, kMaxTimeoutMs).
inline constexpr uint64_t kMaxTimeoutS = 86'400;
// Journal part and anchor shard files: at least a page; a part is buffered whole in memory.
inline constexpr uint64_t kMinJournalFileBytes = 4096;
inline constexpr uint64_t kMaxPartBytes = uint64_t{4} << 30;
inline constexpr uint64_t kMaxShardBytes = uint64_t{1} << 40;
// Seeds of synthetic data: any uint64 (but "-1" is still refused).
inline constexpr uint64_t kMaxSeed = std::numeric_limits<uint64_t>::max();

// `weightcast bench ...`: bounds that keep a benchmark within one large host.
inline constexpr int kMaxRepetitions = 100;       // runs per measurement
inline constexpr double kMinBenchDensity = 1e-9;  // fraction of elements changed
inline constexpr double kMaxBenchDensity = 0.9;
inline constexpr double kMinBenchScale = 1e-6;  // model_layer_list scale
inline constexpr double kMaxBenchScale = 16;
inline constexpr uint64_t kMaxBenchTensorElements = uint64_t{1} << 32;  // one bf16 tensor
inline constexpr uint64_t kMaxBenchParameters = uint64_t{32} << 30;     // a whole model
inline constexpr uint64_t kMaxBenchTensors = uint64_t{1} << 20;
inline constexpr uint64_t kMaxBenchDeltas = 10'000;
inline constexpr uint64_t kMaxBenchPartBytes = uint64_t{16} << 30;  // one UCX part
inline constexpr uint64_t kMaxBenchIterations = 1'000'000'000;
inline constexpr size_t kMaxBenchChunkBytes = size_t{1} << 30;
inline constexpr size_t kMaxBenchGetsInFlight = 1024;

namespace number_flags_detail {

template <typename T>
std::string show(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    std::ostringstream out;
    out << v;
    return out.str();
  } else {
    return std::to_string(v);
  }
}

}  // namespace number_flags_detail

// "" when `text` is a number of T's kind in [min, max], else why not (for the validator).
template <typename T>
std::string check_number_text(const std::string& text, T min, T max) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  using number_flags_detail::show;
  const char* kind = std::is_floating_point_v<T> ? "a number"
                     : std::is_signed_v<T>       ? "an integer"
                                                 : "a non-negative integer";
  const std::string refusal =
      "'" + text + "' is not " + kind + " in [" + show(min) + ", " + show(max) + "]";
  if (text.empty()) return refusal;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  T value{};
  std::from_chars_result r{};
  if constexpr (std::is_floating_point_v<T>) {
    r = std::from_chars(first, last, value, std::chars_format::general);
    if (r.ec == std::errc() && !std::isfinite(value)) return refusal;
  } else {
    // from_chars refuses '-' for unsigned T and '+' always; base 10 refuses "0x".
    r = std::from_chars(first, last, value, 10);
  }
  if (r.ec != std::errc() || r.ptr != last) return refusal;
  if (value < min || value > max) return refusal;
  return std::string();
}

// A CLI11 validator refusing what check_number_text refuses; its description ("in [1, 1024]")
// appears in --help.
template <typename T>
CLI::Validator number_in(T min, T max) {
  using number_flags_detail::show;
  return CLI::Validator(
      [min, max](std::string& text) { return check_number_text<T>(text, min, max); },
      "in [" + show(min) + ", " + show(max) + "]");
}

}  // namespace weightcast::cli
