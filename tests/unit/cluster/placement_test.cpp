// Placement on one node: fit, GPU choice under pack and spread, headroom, misfit reasons.
#include "vramkit/cluster/placement.hpp"

#include <gtest/gtest.h>

#include "vramkit/core/error.hpp"
#include "vramkit/core/units.hpp"

namespace vramkit::cluster {
namespace {

gpu_state gpu(int index, std::uint64_t total_gib, std::uint64_t used_gib) {
  gpu_state g;
  g.index = index;
  g.name = "test";
  g.total_bytes = total_gib * GiB;
  g.used_bytes = used_gib * GiB;
  g.free_bytes = derived_free_bytes(g.total_bytes, g.used_bytes);
  return g;
}

node_state node(std::vector<gpu_state> gpus) { return node_state{"n", std::move(gpus)}; }

TEST(Placement, PackChoosesTheGpuLeftFullest) {
  // free: 60, 20, 30 GiB; a 16 GiB request leaves 44, 4, 14.
  const node_state n = node({gpu(0, 80, 20), gpu(1, 80, 60), gpu(2, 40, 10)});
  const placement p = place_on_node(16 * GiB, n, {placement_policy::pack, {}});
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.gpu_index, 1);
  EXPECT_EQ(p.free_after_bytes, 4 * GiB);
  EXPECT_NEAR(p.score, 1.0 - 4.0 / 80.0, 1e-12);
}

TEST(Placement, SpreadChoosesTheGpuWithMostRoomLeft) {
  const node_state n = node({gpu(0, 80, 20), gpu(1, 80, 60), gpu(2, 40, 10)});
  const placement p = place_on_node(16 * GiB, n, {placement_policy::spread, {}});
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.gpu_index, 0);
  EXPECT_NEAR(p.score, 44.0 / 80.0, 1e-12);
}

TEST(Placement, ExactFitFitsAndOneByteMoreDoesNot) {
  const node_state n = node({gpu(0, 80, 56)});
  EXPECT_TRUE(place_on_node(24 * GiB, n, {}).fits);
  const placement p = place_on_node(24 * GiB + 1, n, {});
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.gpu_index, -1);
  EXPECT_EQ(p.score, 0.0);
  EXPECT_EQ(p.why, misfit::not_enough_free);
}

TEST(Placement, RequestLargerThanEveryGpuIsTooLarge) {
  const node_state n = node({gpu(0, 80, 0), gpu(1, 40, 0)});
  const placement p = place_on_node(81 * GiB, n, {});
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.why, misfit::too_large);
  EXPECT_NE(describe_misfit(81 * GiB, n, {}).find("largest GPU here holds 80.00 GiB"),
            std::string::npos);
}

TEST(Placement, FreeMemorySplitOverGpusDoesNotCount) {
  // 30 GiB free in total, but no single GPU has 30.
  const node_state n = node({gpu(0, 40, 25), gpu(1, 40, 25)});
  const placement p = place_on_node(30 * GiB, n, {});
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.why, misfit::not_enough_free);
  EXPECT_NE(describe_misfit(30 * GiB, n, {}).find("most free on one GPU here is 15.00 GiB"),
            std::string::npos);
}

TEST(Placement, HeadroomBytesAreKeptFree) {
  const node_state n = node({gpu(0, 80, 56)});  // 24 GiB free
  placement_options o;
  o.safety = headroom{2 * GiB, 0.0};
  EXPECT_FALSE(place_on_node(23 * GiB, n, o).fits);
  EXPECT_TRUE(place_on_node(22 * GiB, n, o).fits);
  // Capacity also loses the headroom: 79 GiB on an 80 GiB GPU with 2 GiB kept is too large.
  EXPECT_EQ(place_on_node(79 * GiB, node({gpu(0, 80, 0)}), o).why, misfit::too_large);
}

TEST(Placement, HeadroomFractionScalesWithTheGpu) {
  placement_options o;
  o.safety = parse_headroom("10%");
  // 10% of 80 GiB = 8 GiB kept; of 40 GiB = 4 GiB kept.
  EXPECT_TRUE(place_on_node(72 * GiB, node({gpu(0, 80, 0)}), o).fits);
  EXPECT_FALSE(place_on_node(72 * GiB + 1, node({gpu(0, 80, 0)}), o).fits);
  EXPECT_TRUE(place_on_node(36 * GiB, node({gpu(0, 40, 0)}), o).fits);
  EXPECT_FALSE(place_on_node(37 * GiB, node({gpu(0, 40, 0)}), o).fits);
}

TEST(Placement, DownGpusAreSkipped) {
  gpu_state down = gpu(0, 141, 0);
  down.up = false;
  const node_state n = node({down, gpu(1, 80, 0)});
  const placement p = place_on_node(100 * GiB, n, {});
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.why, misfit::too_large);
  EXPECT_EQ(place_on_node(10 * GiB, n, {}).gpu_index, 1);
  EXPECT_EQ(place_on_node(1, node({down}), {}).why, misfit::no_gpus);
  EXPECT_EQ(place_on_node(1, node({}), {}).why, misfit::no_gpus);
}

TEST(Placement, TiesGoToTheLowestIndex) {
  const node_state n = node({gpu(0, 80, 10), gpu(1, 80, 10), gpu(2, 80, 10)});
  EXPECT_EQ(place_on_node(GiB, n, {placement_policy::pack, {}}).gpu_index, 0);
  EXPECT_EQ(place_on_node(GiB, n, {placement_policy::spread, {}}).gpu_index, 0);
}

TEST(Placement, FreeFigureAboveTotalIsClamped) {
  gpu_state g = gpu(0, 40, 0);
  g.free_bytes = 100 * GiB;  // a bogus exporter figure must not make room that is not there
  EXPECT_FALSE(place_on_node(41 * GiB, node({g}), {}).fits);
}

TEST(Placement, ExtenderPriorityIsOnTheZeroToTenScale) {
  placement p;
  EXPECT_EQ(extender_priority(p), 0);
  p.fits = true;
  p.score = 1.0;
  EXPECT_EQ(extender_priority(p), 10);
  p.score = 0.44;
  EXPECT_EQ(extender_priority(p), 4);
  p.score = 0.0;
  EXPECT_EQ(extender_priority(p), 0);
}

TEST(Placement, ParsesPolicyAndHeadroom) {
  EXPECT_EQ(parse_placement_policy("pack"), placement_policy::pack);
  EXPECT_EQ(parse_placement_policy("spread"), placement_policy::spread);
  EXPECT_THROW((void)parse_placement_policy("random"), invalid_input);
  EXPECT_EQ(parse_headroom("2GiB").bytes, 2 * GiB);
  EXPECT_DOUBLE_EQ(parse_headroom("5%").fraction, 0.05);
  EXPECT_THROW((void)parse_headroom("150%"), invalid_input);
  EXPECT_THROW((void)parse_headroom("x%"), invalid_input);
  EXPECT_THROW((void)parse_headroom("lots"), invalid_input);
  headroom h{GiB / 2, 0.01};
  EXPECT_EQ(h.for_total(80 * GiB), 858993460u);  // ceil(0.01 * 80 GiB) beats 0.5 GiB
  EXPECT_EQ(h.for_total(10 * GiB), GiB / 2);     // 0.1 GiB does not
}

}  // namespace
}  // namespace vramkit::cluster
