#include "vramkit/core/units.hpp"

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"

namespace vramkit {
namespace {

TEST(Units, FormatsBinarySizes) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3.0 * GiB), "3.00 GiB");
}

TEST(Units, FormatsBandwidthInDecimalGigabytes) {
  EXPECT_EQ(format_bandwidth(55.2e9), "55.20 GB/s");
}

TEST(Units, ParsesSizesWithUnits) {
  EXPECT_EQ(parse_bytes("24GiB"), 24 * GiB);
  EXPECT_EQ(parse_bytes("24 GiB"), 24 * GiB);
  EXPECT_EQ(parse_bytes("1.5G"), GiB + GiB / 2);
  EXPECT_EQ(parse_bytes("24GB"), 24000000000ULL);
  EXPECT_EQ(parse_bytes("4096"), 4096U);
  EXPECT_EQ(parse_bytes("512KiB"), 512 * KiB);
}

TEST(Units, RejectsBadSizesNamingTheText) {
  EXPECT_THROW(parse_bytes("-1GiB"), invalid_input);
  EXPECT_THROW(parse_bytes("abc"), invalid_input);
  EXPECT_THROW(parse_bytes("12 parsecs"), invalid_input);
  EXPECT_THROW(parse_bytes("1e30"), invalid_input);
  try {
    parse_bytes("12XB");
  } catch (const invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("12XB"), std::string::npos);
  }
}

TEST(Units, AlignsUp) {
  EXPECT_EQ(align_up(1, 256), 256U);
  EXPECT_EQ(align_up(256, 256), 256U);
  EXPECT_EQ(align_up(257, 256), 512U);
}

}  // namespace
}  // namespace vramkit
