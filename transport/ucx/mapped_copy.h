// copy_from_mapping: memcpy for reading a part out of a publisher's shared-memory mapping
// (UcxSubscriberTransport's mapped path), written out because glibc's memcpy is too slow here.
//
// Why not memcpy: for copies of a few KiB to about L2 size, glibc (2.36) uses `rep movsb`,
// which on the AMD EPYC machines we measure on copies 10-20x slower when source and
// destination sit at different offsets within a cache line, e.g. a page-aligned shared
// segment into a malloc'ed buffer that starts 16 bytes past a page (1.4 vs 21 GB/s for 64 KiB
// pieces of 1 MiB; docs/PERFORMANCE.md). This copy aligns the destination and moves 128 bytes
// per step with unaligned loads and aligned stores: AVX2 where the CPU has it, SSE2
// otherwise, memcpy on other architectures.
//
// Contract: as memcpy (the ranges do not overlap); any alignment, any size.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weightcast {

void copy_from_mapping(uint8_t* to, const uint8_t* from, size_t n);

}  // namespace weightcast
