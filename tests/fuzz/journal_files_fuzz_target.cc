// libFuzzer target: parse a journal HEAD, MANIFEST or lease file (transport/fs/journal_files.h).
// The first byte picks the kind and whether the rest is a framed file or a bare message to
// frame (tests/fuzz/journal_files_fuzz_seeds.h). The invariants checked on every input: a
// refusal is kDataLoss and its message names the file; whatever parses is refused by the
// parsers of the other two kinds (distinct magics), and framed again by
// frame_journal_message it parses to an identical message whose frame is the same bytes (a
// fixed point); a parsed manifest passes check_manifest on its own. Anything else, or a
// crash, aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "tests/fuzz/journal_files_fuzz_seeds.h"
#include "transport/fs/journal_files.h"

#if __has_include(<google/protobuf/stubs/logging.h>)
#include <google/protobuf/stubs/logging.h>
#define WEIGHTCAST_SILENCE_PROTOBUF_LOG 1
#endif

namespace weightcast::fuzzing {

JournalFilesFuzzCounts journal_files_fuzz_counts;

int check_journal_files_fuzz_coverage(size_t seeds) {
  const auto& c = journal_files_fuzz_counts;
  std::printf("journal files fuzz: %llu parsed, %llu refused by the frame, %llu by the content\n",
              static_cast<unsigned long long>(c.parsed),
              static_cast<unsigned long long>(c.frame_refused),
              static_cast<unsigned long long>(c.content_refused));
  if (c.parsed < seeds || c.frame_refused == 0 || c.content_refused == 0) {
    std::fprintf(stderr, "journal files fuzz: inputs did not reach every outcome\n");
    return 1;
  }
  return 0;
}

}  // namespace weightcast::fuzzing

namespace {

using weightcast::JournalFileKind;

const std::string kWhat[3] = {"fuzz-root/HEAD", "fuzz-root/step-00000041/MANIFEST",
                              "fuzz-root/leases/fuzz.lease"};

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
  auto& counts = fuzzing::journal_files_fuzz_counts;
  if (!parsed.ok()) {
    check_refusal(parsed.status(), kWhat[static_cast<int>(kind)]);
    ++(unframe_journal_message(kind, file, "fuzz").ok() ? counts.content_refused
                                                        : counts.frame_refused);
    return;
  }
  ++counts.parsed;
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
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
#ifdef WEIGHTCAST_SILENCE_PROTOBUF_LOG
  // Mutated strings are often invalid UTF-8, which protobuf refuses with a log line each time.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
#endif
  if (size == 0) return 0;
  const JournalFileKind kind = fuzzing::kJournalFuzzKinds[data[0] % 3];
  const bool bare = (data[0] / 3) % 2 == 1;
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
  }
  return 0;
}
