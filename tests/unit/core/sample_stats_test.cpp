// sample_stats and percentiles: the one definition of median and quantiles all benchmarks share.
#include "vramkit/core/sample_stats.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace vramkit {
namespace {

TEST(SampleStats, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  // Regression: benchmarks disagreed here (upper middle, nth_element, or the midpoint).
  const auto s = sample_stats::of({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(sample_stats::of({10, 1}).median, 5.5);
}

TEST(SampleStats, MedianOfAnOddCountIsTheMiddleSample) {
  const auto s = sample_stats::of({5, 1, 3});
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(sample_stats::of({7}).median, 7);
}

TEST(SampleStats, EmptyIsAllZero) {
  const auto s = sample_stats::of({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.min, 0);
  EXPECT_EQ(s.median, 0);
  EXPECT_EQ(s.max, 0);
  EXPECT_EQ(percentile({}, 0.5), 0);
}

TEST(Percentile, InterpolatesBetweenClosestRanks) {
  const std::vector<double> v = {10, 20, 30, 40, 50};  // ranks 0..4
  EXPECT_DOUBLE_EQ(percentile(v, 0.0), 10);
  EXPECT_DOUBLE_EQ(percentile(v, 1.0), 50);
  EXPECT_DOUBLE_EQ(percentile(v, 0.5), 30);
  EXPECT_DOUBLE_EQ(percentile(v, 0.25), 20);
  EXPECT_DOUBLE_EQ(percentile(v, 0.9), 46);  // rank 3.6
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2, 4}, 0.5), sample_stats::of({3, 1, 2, 4}).median);
}

TEST(Percentile, SeveralAtOnceMatchOneAtATime) {
  const std::vector<double> v = {9, 2, 7, 4, 4, 1, 8, 3, 6, 5, 0};
  const auto ps = percentiles(v, {0.1, 0.5, 0.99});
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_DOUBLE_EQ(ps[0], percentile(v, 0.1));
  EXPECT_DOUBLE_EQ(ps[1], percentile(v, 0.5));
  EXPECT_DOUBLE_EQ(ps[2], percentile(v, 0.99));
}

TEST(Percentile, RefusesQuantilesOutsideZeroToOne) {
  EXPECT_THROW(percentile({1, 2}, -0.1), std::invalid_argument);
  EXPECT_THROW(percentile({1, 2}, 1.5), std::invalid_argument);
  EXPECT_THROW(percentile({1, 2}, std::nan("")), std::invalid_argument);
}

}  // namespace
}  // namespace vramkit
