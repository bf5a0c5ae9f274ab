// The numeric-flag validator every command uses (src/cli/number_flags.h), on the text a user
// types: the bounds are accepted, anything past them or not a plain number is refused.
#include "src/cli/number_flags.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace weightcast::cli {
namespace {

template <typename T>
bool accepts(const std::string& text, T min, T max) {
  return check_number_text<T>(text, min, max).empty();
}

TEST(NumberFlags, UnsignedBoundsAreAcceptedAndNothingBeyond) {
  EXPECT_TRUE(accepts<uint64_t>("0", 0, kMaxVersion));
  EXPECT_TRUE(accepts<uint64_t>("9223372036854775807", 0, kMaxVersion));
  EXPECT_FALSE(accepts<uint64_t>("9223372036854775808", 0, kMaxVersion));
  EXPECT_TRUE(accepts<size_t>("1", 1, kMaxThreads));
  EXPECT_TRUE(accepts<size_t>("1024", 1, kMaxThreads));
  EXPECT_FALSE(accepts<size_t>("0", 1, kMaxThreads));
  EXPECT_FALSE(accepts<size_t>("1025", 1, kMaxThreads));
}

// CLI11 2.1 reads "-1" into a uint64_t as 2^64-1; the validator sees the text first.
TEST(NumberFlags, NegativeTextNeverWrapsIntoAnUnsigned) {
  const uint64_t all = std::numeric_limits<uint64_t>::max();
  for (const char* text : {"-1", "-0", "-18446744073709551615", " -1"}) {
    EXPECT_FALSE(accepts<uint64_t>(text, 0, all)) << text;
    EXPECT_FALSE(accepts<uint32_t>(text, 0, 4294967295u)) << text;
  }
  EXPECT_TRUE(accepts<uint64_t>("18446744073709551615", 0, all));
  EXPECT_FALSE(accepts<uint64_t>("18446744073709551616", 0, all));
}

TEST(NumberFlags, OnlyPlainDecimalIntegers) {
  for (const char* text : {"", "abc", "1.5", "1e3", "0x10", "+5", "5 ", " 5", "5abc", "1,000"}) {
    EXPECT_FALSE(accepts<uint64_t>(text, 0, 1'000'000)) << "'" << text << "'";
    EXPECT_FALSE(accepts<int>(text, -1'000'000, 1'000'000)) << "'" << text << "'";
  }
  EXPECT_TRUE(accepts<int>("-5", -10, 10));
  EXPECT_FALSE(accepts<int>("-11", -10, 10));
  EXPECT_TRUE(accepts<uint64_t>("007", 0, 10));
}

TEST(NumberFlags, FloatsAreFiniteAndInRange) {
  EXPECT_TRUE(accepts<double>("0.01", 1e-9, 0.9));
  EXPECT_TRUE(accepts<double>("1e-3", 1e-9, 0.9));
  EXPECT_TRUE(accepts<double>("0.9", 1e-9, 0.9));
  for (const char* text : {"0", "-0.5", "0.91", "nan", "inf", "-inf", "abc", "", "0.5x", "1e999"})
    EXPECT_FALSE(accepts<double>(text, 1e-9, 0.9)) << "'" << text << "'";
}

TEST(NumberFlags, TheRefusalQuotesTheValueAndTheRange) {
  EXPECT_EQ(check_number_text<uint64_t>("-1", 0, kMaxVersion),
            "'-1' is not a non-negative integer in [0, 9223372036854775807]");
  EXPECT_EQ(check_number_text<int>("x", 1, 100), "'x' is not an integer in [1, 100]");
  EXPECT_EQ(check_number_text<double>("2", 1e-9, 0.9), "'2' is not a number in [1e-09, 0.9]");
}

// Through CLI11 itself: the option's name leads the error and nothing is stored.
TEST(NumberFlags, Cli11ReportsTheFlagAndKeepsTheDefault) {
  CLI::App app;
  uint64_t version = 7;
  app.add_option("--version", version)->check(number_in<uint64_t>(0, kMaxVersion));
  std::vector<std::string> args{"--version", "-1"};
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
    FAIL() << "accepted --version -1 as " << version;
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("--version"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'-1'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(version, 7u);
  app.parse(std::vector<std::string>{"9223372036854775807", "--version"});
  EXPECT_EQ(version, kMaxVersion);
}

}  // namespace
}  // namespace weightcast::cli
