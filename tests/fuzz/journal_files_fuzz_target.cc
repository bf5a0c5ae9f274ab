// libFuzzer target: parse a journal HEAD, MANIFEST or lease file (transport/fs/journal_files.h).
// The first byte picks the kind and whether the rest is a framed file or a bare message to
// frame (tests/fuzz/journal_files_fuzz_seeds.h). The invariants checked on every input: a
// refusal is kDataLoss and its message names the file; whatever parses is refused by the
// parsers of the other two kinds (distinct magics), and framed again by
// frame_journal_message it parses to an identical message whose frame is the same bytes (a
// fixed point); a parsed manifest passes check_manifest on its own. Anything else, or a
// crash, aborts.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_reach.h"
#include "tests/fuzz/journal_files_fuzz_seeds.h"
#include "transport/fs/journal_files.h"

#if __has_include(<google/protobuf/stubs/logging.h>)
#include <google/protobuf/stubs/logging.h>
#define WEIGHTCAST_SILENCE_PROTOBUF_LOG 1
#endif

namespace weightcast::fuzzing {

namespace {
enum Depth : size_t { kFrameRefused, kContentRefused, kParsed };
}  // namespace

// Bare inputs are framed by the target, so that half the mutations reach the content.
std::span<const FuzzDepth> fuzz_depths() {
  static constexpr FuzzDepth kDepths[] = {
      {"empty, or refused by the frame (size, magic, length, XXH3)", 10},
      {"refused by protobuf or the content checks", 15},
      {"parsed, round-tripped, refused by the other kinds", 1},
  };
  return kDepths;
}

}  // namespace weightcast::fuzzing

namespace {

using weightcast::JournalFileKind;

const std::string kWhat[4] = {"fuzz-root/HEAD", "fuzz-root/step-00000041/MANIFEST",
                              "fuzz-root/leases/fuzz.lease",
                              "fuzz-root/.staging/step-00000041.ranks/rank-1/FRAGMENT"};

// Every refusal names the file it refuses.
void check_refusal(const weightcast::Status& s, const std::string& what) {
  if (s.ok() || s.code() != weightcast::StatusCode::kDataLoss ||
      s.message().find(what) == std::string::npos) {
    std::abort();
  }
}

template <typename Parse>
auto parse_as(JournalFileKind kind, std::span<const uint8_t> bytes, Parse parse) {
  return parse(bytes, kWhat[static_cast<int>(kind)], weightcast::JournalFileLimits{});
}

template <typename Message, typename Parse>
void check_round_trip(JournalFileKind kind, const Message& parsed, Parse parse) {
  const std::vector<uint8_t> again = weightcast::frame_journal_message(kind, parsed);
  auto reparsed = parse_as(kind, again, parse);
  if (!reparsed.ok() || reparsed->SerializeAsString() != parsed.SerializeAsString()) std::abort();
  if (weightcast::frame_journal_message(kind, *reparsed) != again) std::abort();
}

// Parses `file` as `kind` and checks the invariants; the other kinds must refuse what parses.
template <typename Parse>
void check_kind(JournalFileKind kind, std::span<const uint8_t> file, Parse parse) {
  using namespace weightcast;
  auto parsed = parse_as(kind, file, parse);
  if (!parsed.ok()) {
    check_refusal(parsed.status(), kWhat[static_cast<int>(kind)]);
    fuzzing::fuzz_reached(unframe_journal_message(kind, file, "fuzz").ok()
                              ? fuzzing::kContentRefused
                              : fuzzing::kFrameRefused);
    return;
  }
  check_round_trip(kind, *parsed, parse);
  if (kind != JournalFileKind::kHead) {
    check_refusal(parse_head(file, kWhat[0]).status(), kWhat[0]);
  }
  if (kind != JournalFileKind::kManifest) {
    check_refusal(parse_manifest(file, kWhat[1]).status(), kWhat[1]);
  }
  if (kind != JournalFileKind::kLease) {
    check_refusal(parse_lease(file, kWhat[2]).status(), kWhat[2]);
  }
  if (kind != JournalFileKind::kFragment) {
    check_refusal(parse_rank_fragment(file, kWhat[3]).status(), kWhat[3]);
  }
  fuzzing::fuzz_reached(fuzzing::kParsed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
#ifdef WEIGHTCAST_SILENCE_PROTOBUF_LOG
  // Mutated strings are often invalid UTF-8, which protobuf refuses with a log line each time.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
#endif
  if (size == 0) {
    fuzzing::fuzz_reached(fuzzing::kFrameRefused);  // no selector byte: nothing to frame
    return 0;
  }
  const JournalFileKind kind = fuzzing::kJournalFuzzKinds[data[0] % 4];
  const bool bare = (data[0] / 4) % 2 == 1;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  std::vector<uint8_t> framed;
  if (bare) framed = fuzzing::frame_raw_journal_payload(kind, rest);
  const std::span<const uint8_t> file = bare ? std::span<const uint8_t>(framed) : rest;

  switch (kind) {
    case JournalFileKind::kHead:
      check_kind(kind, file, [](auto b, const std::string& w, const JournalFileLimits& l) {
        return parse_head(b, w, l);
      });
      break;
    case JournalFileKind::kManifest:
      check_kind(kind, file, [](auto b, const std::string& w, const JournalFileLimits& l) {
        auto m = parse_manifest(b, w, l);
        // What parse_manifest accepts passes check_manifest again on its own.
        if (m.ok() && !check_manifest(*m, w, l).ok()) std::abort();
        return m;
      });
      break;
    case JournalFileKind::kLease:
      check_kind(kind, file, [](auto b, const std::string& w, const JournalFileLimits& l) {
        return parse_lease(b, w, l);
      });
      break;
    case JournalFileKind::kFragment:  // a rank's own ranges, boxes among them
      check_kind(kind, file, [](auto b, const std::string& w, const JournalFileLimits& l) {
        return parse_rank_fragment(b, w, l);
      });
      break;
  }
  return 0;
}
