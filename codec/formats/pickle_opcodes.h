// Internal to the torch pickle codec, not API (that is codec/formats/torch_pickle.h): what the
// writer (torch_pickle_writer.cc) and the restricted reader (torch_pickle_reader.cc) share. The
// functions here are defined in torch_pickle.cc.
#pragma once

#include <cstdint>
#include <string_view>

namespace weightcast::pickle_internal {

// Pickle opcodes (CPython Lib/pickle.py), only those this file reads or writes.
enum Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinUnicode = 'X',
  kBuild = 'b',
  kGlobal = 'c',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kSetItems = 'u',
  kEmptyDict = '}',
  kEmptyTuple = ')',
  kProto = 0x80,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
};

// Strict UTF-8 (what Python's str decode accepts, minus the surrogates that only
// "surrogatepass" lets through, which no tensor name needs).
bool valid_utf8(std::string_view s);

}  // namespace weightcast::pickle_internal
