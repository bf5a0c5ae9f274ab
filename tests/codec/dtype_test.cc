#include "codec/dtype.h"

#include <gtest/gtest.h>

namespace weightcast {
namespace {

TEST(DType, TableCoversEveryDesignType) {
  ASSERT_EQ(all_dtypes().size(), 12u);
  for (const auto& info : all_dtypes()) {
    EXPECT_EQ(&dtype_info(info.dtype), &info);
    EXPECT_EQ(*dtype_from_name(info.name), info.dtype);
    EXPECT_EQ(*dtype_from_safetensors(info.safetensors), info.dtype);
    EXPECT_EQ(*dtype_from_name(info.torch), info.dtype);
    EXPECT_EQ(*dtype_from_torch_storage(info.torch_storage), info.dtype);
    EXPECT_EQ(*dtype_from_code(static_cast<uint8_t>(info.dtype)), info.dtype);
  }
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF8E4M3FN), 1u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  EXPECT_EQ(dtype_info(DType::kF8E4M3FN).safetensors, "F8_E4M3");
  EXPECT_EQ(dtype_info(DType::kBF16).torch, "torch.bfloat16");
  EXPECT_EQ(*dtype_from_name("bfloat16"), DType::kBF16);
}

TEST(DType, UnknownNamesAreErrorsThatQuoteTheName) {
  auto r = dtype_from_name("bf17");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bf17"), std::string::npos);
  EXPECT_FALSE(dtype_from_safetensors("F4").ok());
  EXPECT_FALSE(dtype_from_code(0).ok());
  EXPECT_FALSE(dtype_from_code(13).ok());
  EXPECT_FALSE(dtype_from_torch_storage("os.system").ok());
}

}  // namespace
}  // namespace weightcast
