// Model-sized allocations: a size the host cannot hold is a Status naming what was being
// allocated, never a std::bad_alloc escaping to the caller.
#include "codec/base/allocation.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace weightcast {
namespace {

// Under AddressSanitizer a huge request aborts unless allocator_may_return_null is set.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

TEST(Allocation, SmallBuffersAreZeroed) {
  auto r = allocate_bytes(4096, "a test buffer");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 4096u);
  for (uint8_t b : *r) ASSERT_EQ(b, 0);
}

TEST(Allocation, ImpossibleSizesAreAStatusNamingTheBuffer) {
  if (kAsan) GTEST_SKIP() << "AddressSanitizer aborts on huge allocations";
  for (size_t n : {size_t{1} << 62, std::numeric_limits<size_t>::max()}) {
    auto r = allocate_bytes(n, "tensor 'w'");
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(r.status().message().find("tensor 'w'"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(std::to_string(n)), std::string::npos)
        << r.status().message();
  }
}

TEST(Allocation, AllocateOrStatusPassesValuesThrough) {
  auto r = allocate_or_status(8, "eight bytes", [] { return std::string(8, 'x'); });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "xxxxxxxx");
  auto failed = allocate_or_status(1, "a thrower", []() -> std::string { throw std::bad_alloc(); });
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("a thrower"), std::string::npos);
}

TEST(Allocation, PhysicalMemoryIsKnownOnLinux) {
  EXPECT_GT(physical_memory_bytes(), uint64_t{1} << 20);
}

}  // namespace
}  // namespace weightcast
