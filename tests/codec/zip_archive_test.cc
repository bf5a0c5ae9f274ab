#include "codec/formats/zip_archive.h"
#include "tests/test_bytes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec/base/byte_io.h"

namespace weightcast {
namespace {

using testing::Bytes;
using testing::bytes_of;
using testing::sink_into;

struct Named {
  std::string name;
  Bytes data;
};

Bytes write_zip(const std::vector<Named>& entries, ZipWriterOptions options = {}) {
  Bytes out;
  ZipWriter w(sink_into(&out), options);
  for (const Named& e : entries) EXPECT_TRUE(w.add_stored(e.name, e.data).ok()) << e.name;
  EXPECT_TRUE(w.finish().ok());
  EXPECT_EQ(w.bytes_written(), out.size());
  return out;
}

std::vector<Named> sample_entries() {
  Bytes big(1000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + 3);
  return {{"arch/data.pkl", bytes_of("pickle bytes")},
          {"arch/empty", {}},
          {"arch/data/0", big},
          {"arch/version", bytes_of("3\n")}};
}

// Offset of the end of central directory record (the writer adds no comment).
size_t eocd_offset(const Bytes& zip) {
  return zip.size() - 22;
}
size_t central_offset(const Bytes& zip) {
  return load_le<uint32_t>(zip.data() + eocd_offset(zip) + 16);
}
// Offset of the central directory record of entry `index` (no extras or comments: the
// writer's non-ZIP64 records are 46 bytes plus the name).
size_t central_record(const Bytes& zip, size_t index) {
  size_t pos = central_offset(zip);
  for (size_t i = 0; i < index; ++i) {
    pos += 46 + load_le<uint16_t>(zip.data() + pos + 28) + load_le<uint16_t>(zip.data() + pos + 30);
  }
  return pos;
}

// Replaces every occurrence of `from` by `to` (same length) in both headers of an entry.
void rename_all(Bytes* zip, std::string_view from, std::string_view to) {
  ASSERT_EQ(from.size(), to.size());
  size_t hits = 0;
  for (auto it = zip->begin();
       (it = std::search(it, zip->end(), from.begin(), from.end())) != zip->end(); ++hits) {
    std::copy(to.begin(), to.end(), it);
  }
  ASSERT_EQ(hits, 2u) << from;
}

void expect_error(const Bytes& zip, StatusCode code, std::string_view fragment,
                  ZipLimits limits = {}) {
  auto r = parse_zip(zip, limits);
  ASSERT_FALSE(r.ok()) << "parsed although it should fail with: " << fragment;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().to_string();
}

TEST(ZipArchive, RoundTripsStoredEntriesInOrder) {
  const auto entries = sample_entries();
  const Bytes zip = write_zip(entries);
  auto r = parse_zip(zip);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->zip64);
  ASSERT_EQ(r->entries.size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const ZipEntry& e = r->entries[i];
    EXPECT_EQ(e.name, entries[i].name);
    EXPECT_EQ(Bytes(e.data.begin(), e.data.end()), entries[i].data);
    EXPECT_EQ(e.crc32, zip_crc32(entries[i].data));
    EXPECT_EQ(e.data.data(), zip.data() + e.data_offset);
  }
  EXPECT_EQ(r->find("arch/version"), &r->entries[3]);
  EXPECT_EQ(r->find("arch/missing"), nullptr);
  EXPECT_EQ(zip_crc32(bytes_of("123456789")), 0xCBF43926u);  // the CRC-32 check value
}

TEST(ZipArchive, EveryDataRecordStartsOn64Bytes) {
  std::vector<Named> entries;
  for (size_t n = 1; n <= 70; ++n) {
    entries.push_back({"d/" + std::string(n, 'a' + static_cast<char>(n % 26)), Bytes(n * 3, 1)});
  }
  for (bool force : {false, true}) {
    ZipWriterOptions o;
    o.force_zip64 = force;
    const Bytes zip = write_zip(entries, o);
    auto r = parse_zip(zip);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (const ZipEntry& e : r->entries) EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
  }
  ZipWriterOptions o;
  o.alignment = 4096;
  auto r = parse_zip(write_zip(entries, o));
  ASSERT_TRUE(r.ok());
  for (const ZipEntry& e : r->entries) EXPECT_EQ(e.data_offset % 4096, 0u) << e.name;
}

TEST(ZipArchive, ForcedZip64RoundTrips) {
  ZipWriterOptions o;
  o.force_zip64 = true;
  const Bytes zip = write_zip(sample_entries(), o);
  // The classic end record defers every field to the ZIP64 one.
  const uint8_t* e = zip.data() + eocd_offset(zip);
  EXPECT_EQ(load_le<uint16_t>(e + 10), 0xFFFF);
  EXPECT_EQ(load_le<uint32_t>(e + 12), 0xFFFFFFFFu);
  EXPECT_EQ(load_le<uint32_t>(e + 16), 0xFFFFFFFFu);
  EXPECT_EQ(load_le<uint32_t>(e - 20), 0x07064b50u);
  auto r = parse_zip(zip);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->zip64);
  ASSERT_EQ(r->entries.size(), 4u);
  EXPECT_EQ(r->entries[2].data.size(), 1000u);
  EXPECT_EQ(r->entries[2].data[999], static_cast<uint8_t>(999 * 7 + 3));
}

TEST(ZipArchive, MoreThan65535EntriesUseZip64EndRecords) {
  Bytes out;
  ZipWriter w(sink_into(&out));
  const uint8_t byte = 42;
  for (size_t i = 0; i < 65536; ++i) ASSERT_TRUE(w.add_stored(std::to_string(i), {&byte, 1}).ok());
  ASSERT_TRUE(w.finish().ok());
  auto r = parse_zip(out);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->zip64);
  ASSERT_EQ(r->entries.size(), 65536u);
  EXPECT_EQ(r->entries.back().name, "65535");
}

TEST(ZipArchive, StreamedEntryMatchesWholeEntry) {
  const Bytes data = sample_entries()[2].data;
  Bytes out;
  ZipWriter w(sink_into(&out));
  ASSERT_TRUE(w.begin_stored("s/x", data.size(), zip_crc32(data)).ok());
  for (size_t at = 0; at < data.size(); at += 300) {
    ASSERT_TRUE(
        w.append(std::span(data).subspan(at, std::min<size_t>(300, data.size() - at))).ok());
  }
  ASSERT_TRUE(w.end_stored().ok());
  ASSERT_TRUE(w.finish().ok());
  EXPECT_EQ(out, write_zip({{"s/x", data}}));
}

TEST(ZipArchive, WriterRefusesMisuse) {
  const Bytes data = bytes_of("abc");
  Bytes out;
  {
    ZipWriter w(sink_into(&out));
    ASSERT_TRUE(w.begin_stored("a", 3, zip_crc32(data)).ok());
    ASSERT_TRUE(w.append(data).ok());
    EXPECT_NE(w.append(data).message().find("more than its declared 3 bytes"), std::string::npos);
    EXPECT_FALSE(w.finish().ok());  // errors are sticky
  }
  {
    ZipWriter w(sink_into(&out));
    ASSERT_TRUE(w.begin_stored("a", 4, 0).ok());
    ASSERT_TRUE(w.append(data).ok());
    EXPECT_NE(w.end_stored().message().find("1 bytes short"), std::string::npos);
  }
  {
    ZipWriter w(sink_into(&out));
    ASSERT_TRUE(w.begin_stored("a", 3, 1234).ok());
    ASSERT_TRUE(w.append(data).ok());
    EXPECT_NE(w.end_stored().message().find("declared CRC32"), std::string::npos);
  }
  {
    ZipWriter w(sink_into(&out));
    ASSERT_TRUE(w.add_stored("a", data).ok());
    Status dup = w.add_stored("a", data);
    EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(dup.message().find("duplicate entry name 'a'"), std::string::npos);
  }
  for (const char* bad : {"", "../x", "/abs", "a\\b", "a//b", "C:/x"}) {
    ZipWriter w(sink_into(&out));
    EXPECT_EQ(w.add_stored(bad, data).code(), StatusCode::kInvalidArgument) << bad;
  }
  {
    ZipWriter w(sink_into(&out));
    ASSERT_TRUE(w.begin_stored("a", 3, zip_crc32(data)).ok());
    EXPECT_NE(w.finish().message().find("is open"), std::string::npos);
  }
  {
    ZipWriter w(sink_into(&out));
    ASSERT_TRUE(w.finish().ok());
    EXPECT_NE(w.add_stored("b", data).message().find("already finished"), std::string::npos);
  }
  {
    ZipWriter w([](std::span<const uint8_t>) { return io_error("disk full"); });
    Status s = w.add_stored("a", data);
    EXPECT_EQ(s.code(), StatusCode::kIoError);
    EXPECT_EQ(w.finish().code(), StatusCode::kIoError);
  }
}

TEST(ZipArchive, EmptyArchiveParses) {
  auto r = parse_zip(write_zip({}));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->entries.empty());
}

TEST(ZipArchive, AcceptsDataDescriptorWithZeroLocalFields) {
  // PyTorch's miniz writer sets bit 3 and leaves CRC and sizes zero in the local header.
  Bytes zip = write_zip(sample_entries());
  auto r = parse_zip(zip);
  ASSERT_TRUE(r.ok());
  for (const ZipEntry& e : r->entries) {
    uint8_t* l = zip.data() + e.local_header_offset;
    store_le<uint16_t>(l + 6, 0x0808);
    std::memset(l + 14, 0, 12);
  }
  auto again = parse_zip(zip);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->entries[2].data.size(), 1000u);
}

TEST(ZipArchive, DeferredCrcCheck) {
  Bytes zip = write_zip(sample_entries());
  zip[parse_zip(zip)->entries[2].data_offset + 5] ^= 1;
  ZipLimits limits;
  limits.verify_crc = false;
  auto r = parse_zip(zip, limits);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(verify_zip_entry_crc(r->entries[0]).ok());
  EXPECT_EQ(verify_zip_entry_crc(r->entries[2]).code(), StatusCode::kDataLoss);
}

// ---- malformed input: one test per case ----

TEST(ZipMalformed, FileTooShort) {
  expect_error(Bytes(10, 0), StatusCode::kDataLoss, "too short");
}

TEST(ZipMalformed, TruncatedTail) {
  Bytes zip = write_zip(sample_entries());
  zip.pop_back();
  expect_error(zip, StatusCode::kDataLoss, "no end of central directory record");
}

TEST(ZipMalformed, TruncatedHalf) {
  Bytes zip = write_zip(sample_entries());
  zip.resize(zip.size() / 2);
  expect_error(zip, StatusCode::kDataLoss, "no end of central directory record");
}

TEST(ZipMalformed, EocdCentralDirectoryOffsetWrong) {
  Bytes zip = write_zip(sample_entries());
  store_le<uint32_t>(zip.data() + eocd_offset(zip) + 16, 7);
  expect_error(zip, StatusCode::kDataLoss, "does not end where the end records start");
}

TEST(ZipMalformed, EocdEntryCountTooLarge) {
  Bytes zip = write_zip(sample_entries());
  store_le<uint16_t>(zip.data() + eocd_offset(zip) + 8, 400);
  store_le<uint16_t>(zip.data() + eocd_offset(zip) + 10, 400);
  expect_error(zip, StatusCode::kDataLoss, "cannot hold 400 entries");
}

TEST(ZipMalformed, EocdEntryCountTooSmall) {
  Bytes zip = write_zip(sample_entries());
  store_le<uint16_t>(zip.data() + eocd_offset(zip) + 8, 3);
  store_le<uint16_t>(zip.data() + eocd_offset(zip) + 10, 3);
  expect_error(zip, StatusCode::kDataLoss, "bytes after its 3 entries");
}

TEST(ZipMalformed, EocdMultiDisk) {
  Bytes zip = write_zip(sample_entries());
  store_le<uint16_t>(zip.data() + eocd_offset(zip) + 4, 1);
  expect_error(zip, StatusCode::kDataLoss, "multi-disk");
}

TEST(ZipMalformed, Zip64LocatorPointsNowhere) {
  ZipWriterOptions o;
  o.force_zip64 = true;
  Bytes zip = write_zip(sample_entries(), o);
  store_le<uint64_t>(zip.data() + eocd_offset(zip) - 20 + 8, 3);
  expect_error(zip, StatusCode::kDataLoss, "holds no ZIP64 end record");
}

TEST(ZipMalformed, Zip64RecordDisagreesWithEocd) {
  ZipWriterOptions o;
  o.force_zip64 = true;
  Bytes zip = write_zip(sample_entries(), o);
  store_le<uint16_t>(zip.data() + eocd_offset(zip) + 10, 3);  // not 0xFFFF and not 4
  store_le<uint16_t>(zip.data() + eocd_offset(zip) + 8, 3);
  expect_error(zip, StatusCode::kDataLoss, "disagrees with the ZIP64 end record");
}

TEST(ZipMalformed, CrcMismatch) {
  Bytes zip = write_zip(sample_entries());
  zip[parse_zip(zip)->entries[2].data_offset + 999] ^= 0x40;
  expect_error(zip, StatusCode::kDataLoss, "zip entry 'arch/data/0': CRC32 mismatch");
}

TEST(ZipMalformed, DotDotComponent) {
  Bytes zip = write_zip({{"ab/cd", bytes_of("x")}});
  rename_all(&zip, "ab/cd", "../cd");
  expect_error(zip, StatusCode::kDataLoss, "'../cd' has a '..' component");
}

TEST(ZipMalformed, AbsolutePath) {
  Bytes zip = write_zip({{"xetc/passwd", bytes_of("x")}});
  rename_all(&zip, "xetc/passwd", "/etc/passwd");
  expect_error(zip, StatusCode::kDataLoss, "'/etc/passwd' is an absolute path");
}

TEST(ZipMalformed, DriveLetterPath) {
  Bytes zip = write_zip({{"C-/x", bytes_of("x")}});
  rename_all(&zip, "C-/x", "C:/x");
  expect_error(zip, StatusCode::kDataLoss, "absolute path (drive letter)");
}

TEST(ZipMalformed, Backslash) {
  Bytes zip = write_zip({{"a/b", bytes_of("x")}});
  rename_all(&zip, "a/b", "a\\b");
  expect_error(zip, StatusCode::kDataLoss, "contains a backslash");
}

TEST(ZipMalformed, EmptyComponent) {
  Bytes zip = write_zip({{"a/xb", bytes_of("x")}});
  rename_all(&zip, "a/xb", "a//b");
  expect_error(zip, StatusCode::kDataLoss, "empty or '.' component");
}

TEST(ZipMalformed, DuplicateNames) {
  Bytes zip = write_zip({{"dir/a1", bytes_of("x")}, {"dir/a2", bytes_of("x")}});
  rename_all(&zip, "dir/a2", "dir/a1");
  expect_error(zip, StatusCode::kDataLoss, "duplicate entry name 'dir/a1'");
}

TEST(ZipMalformed, CompressedMethod) {
  Bytes zip = write_zip(sample_entries());
  store_le<uint16_t>(zip.data() + central_record(zip, 1) + 10, 8);  // deflate
  expect_error(zip, StatusCode::kDataLoss, "'arch/empty' uses compression method 8");
}

TEST(ZipMalformed, EncryptedEntry) {
  Bytes zip = write_zip(sample_entries());
  store_le<uint16_t>(zip.data() + central_record(zip, 0) + 8, 0x0801);
  expect_error(zip, StatusCode::kDataLoss, "'arch/data.pkl' is encrypted");
}

TEST(ZipMalformed, LocalHeaderCrcDisagreesWithCentral) {
  Bytes zip = write_zip(sample_entries());
  const size_t local = parse_zip(zip)->entries[2].local_header_offset;
  zip[local + 14] ^= 1;
  expect_error(zip, StatusCode::kDataLoss, "disagrees with the central directory");
}

TEST(ZipMalformed, LocalHeaderNameDisagreesWithCentral) {
  Bytes zip = write_zip(sample_entries());
  const size_t local = parse_zip(zip)->entries[3].local_header_offset;
  zip[local + 30 + 5] = 'X';  // "arch/version" -> "arch/Xersion" in the local header only
  expect_error(zip, StatusCode::kDataLoss, "names it 'arch/Xersion'");
}

TEST(ZipMalformed, LocalHeaderMissing) {
  Bytes zip = write_zip(sample_entries());
  store_le<uint32_t>(zip.data() + central_record(zip, 1) + 42, 64);  // inside data.pkl's data
  expect_error(zip, StatusCode::kDataLoss, "no local header at offset 64");
}

TEST(ZipMalformed, LocalHeaderOffsetOutsideData) {
  Bytes zip = write_zip(sample_entries());
  store_le<uint32_t>(zip.data() + central_record(zip, 1) + 42, 0x7FFFFFF0);
  expect_error(zip, StatusCode::kDataLoss, "is outside the data area");
}

TEST(ZipMalformed, DataPastEnd) {
  Bytes zip = write_zip(sample_entries());
  const size_t local = parse_zip(zip)->entries[3].local_header_offset;
  const size_t central = central_record(zip, 3);
  for (size_t field : {18, 22}) store_le<uint32_t>(zip.data() + local + field, 100000);
  for (size_t field : {20, 24}) store_le<uint32_t>(zip.data() + central + field, 100000);
  expect_error(zip, StatusCode::kDataLoss, "'arch/version': data (100000 bytes at offset");
}

TEST(ZipMalformed, StoredSizesDiffer) {
  Bytes zip = write_zip(sample_entries());
  store_le<uint32_t>(zip.data() + central_record(zip, 2) + 20, 999);
  expect_error(zip, StatusCode::kDataLoss, "compressed size 999 differs from its size 1000");
}

TEST(ZipMalformed, MissingZip64ExtraField) {
  Bytes zip = write_zip(sample_entries());
  for (size_t field : {20, 24})
    store_le<uint32_t>(zip.data() + central_record(zip, 0) + field, 0xFFFFFFFF);
  expect_error(zip, StatusCode::kDataLoss, "needs a ZIP64 extra field but has none");
}

TEST(ZipMalformed, MalformedExtraField) {
  Bytes zip = write_zip(sample_entries());
  const size_t local = parse_zip(zip)->entries[0].local_header_offset;
  // The "FB" padding field claims more bytes than the extra data holds.
  const size_t extra = local + 30 + load_le<uint16_t>(zip.data() + local + 26);
  store_le<uint16_t>(zip.data() + extra + 2, 1000);
  expect_error(zip, StatusCode::kDataLoss, "malformed extra field");
}

TEST(ZipMalformed, OverlappingEntries) {
  // Entry "a" carries, as its data, a complete entry "b"; b's central record points there.
  const Bytes b_alone = write_zip({{"b", bytes_of("xyz")}});
  const size_t b_end = central_offset(b_alone);
  Bytes zip =
      write_zip({{"a", Bytes(b_alone.begin(), b_alone.begin() + b_end)}, {"b", bytes_of("xyz")}});
  const size_t a_data = parse_zip(zip)->entries[0].data_offset;
  store_le<uint32_t>(zip.data() + central_record(zip, 1) + 42, static_cast<uint32_t>(a_data));
  expect_error(zip, StatusCode::kDataLoss, "zip entries 'a' and 'b' overlap");
}

TEST(ZipMalformed, TooManyEntries) {
  ZipLimits limits;
  limits.max_entries = 3;
  expect_error(write_zip(sample_entries()), StatusCode::kOutOfRange,
               "4 entries exceed the limit of 3", limits);
}

TEST(ZipMalformed, NameTooLong) {
  ZipLimits limits;
  limits.max_name_length = 8;
  expect_error(write_zip(sample_entries()), StatusCode::kOutOfRange, "exceeds the limit of 8",
               limits);
}

}  // namespace
}  // namespace weightcast
