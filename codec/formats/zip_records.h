// Internal to the ZIP codec, not API (that is codec/formats/zip_archive.h): what the writer
// (zip_writer.cc), the reader (zip_reader.cc) and the shared name and CRC code
// (zip_archive.cc, which defines the functions here) share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weightcast::zip_internal {

// Record signatures and fixed sizes (APPNOTE.TXT 4.3).
inline constexpr uint32_t kLocalSig = 0x04034b50;
inline constexpr uint32_t kCentralSig = 0x02014b50;
inline constexpr uint32_t kEocdSig = 0x06054b50;
inline constexpr uint32_t kZip64EocdSig = 0x06064b50;
inline constexpr uint32_t kZip64LocatorSig = 0x07064b50;
inline constexpr size_t kLocalBytes = 30;
inline constexpr size_t kCentralBytes = 46;
inline constexpr size_t kEocdBytes = 22;
inline constexpr size_t kZip64EocdBytes = 56;
inline constexpr size_t kZip64LocatorBytes = 20;
inline constexpr uint32_t kMax32 = 0xFFFFFFFF;  // "see the ZIP64 field" in a 32-bit field
inline constexpr uint16_t kMax16 = 0xFFFF;
inline constexpr uint16_t kZip64ExtraId = 0x0001;
inline constexpr uint16_t kPaddingExtraId = 0x4246;  // the bytes "FB", PyTorch's padding field
inline constexpr uint16_t kFlagEncrypted = 0x0001;
inline constexpr uint16_t kFlagDataDescriptor = 0x0008;
inline constexpr uint16_t kFlagUtf8 = 0x0800;
inline constexpr uint16_t kVersionClassic = 20;
inline constexpr uint16_t kVersionZip64 = 45;
inline constexpr uint16_t kDosDate1980 = 0x0021;  // 1980-01-01: fixed, so output is reproducible

// A name as it appears in messages: control bytes shown as '?', at most 200 bytes.
std::string shown(std::string_view name);

}  // namespace weightcast::zip_internal
