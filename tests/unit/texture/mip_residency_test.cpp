// The residency policy (priorities, budget, mip tail, eviction order, hysteresis) and the
// streamer on the simulated device: chains hold exactly the file's bytes, frames never wait.
#include <gtest/gtest.h>

#include <chrono>

#include "texture_test_support.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/texture/mip_residency_policy.hpp"
#include "vramkit/texture/mip_streamer.hpp"

namespace vramkit::texture {
namespace {

using tf = texture_format;

const mip_chain_desc bc1_1024{pixel_format::of(tf::bc1), 1024, 1024, 11};

residency_policy_options options_with_budget(std::uint64_t budget) {
  residency_policy_options o;
  o.budget_bytes = budget;
  o.max_inflight_bytes = 1ull << 30;
  return o;
}

// Runs frames, completing every action at once, until nothing changes.
void settle(mip_residency_policy& p, const std::function<void()>& requests, int max_frames = 200) {
  for (int f = 0; f < max_frames; ++f) {
    p.begin_frame();
    requests();
    const auto actions = p.plan_frame();
    EXPECT_LE(p.stats().committed_bytes, p.options().budget_bytes);
    if (actions.empty()) return;
    for (const auto& a : actions) p.complete(a);
  }
  ADD_FAILURE() << "did not settle";
}

TEST(MipResidencyPolicy, TailIsResidentAndFitsTheTailBytes) {
  mip_residency_policy p(options_with_budget(64 << 20));
  const int t = p.add_texture(bc1_1024);
  const int tail = p.tail_level(t);
  EXPECT_EQ(p.resident_first_level(t), tail);
  EXPECT_LE(p.chain_bytes_from(t, tail), 64u * 1024);
  EXPECT_GT(p.chain_bytes_from(t, tail - 1), 64u * 1024);
  EXPECT_EQ(p.stats().committed_bytes, p.chain_bytes_from(t, tail));
  mip_residency_policy tiny(options_with_budget(1024));
  EXPECT_THROW(tiny.add_texture(bc1_1024), invalid_input);
}

TEST(MipResidencyPolicy, LoadsOneLevelAtATimeUpToTheWantedLevel) {
  mip_residency_policy p(options_with_budget(64 << 20));
  const int t = p.add_texture(bc1_1024);
  const int tail = p.tail_level(t);
  p.begin_frame();
  p.request(t, 1.7f, 1000);
  auto a = p.plan_frame();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, residency_action_kind::load_finer);
  EXPECT_EQ(a[0].new_first_level, tail - 1);
  // While it is in flight, both chains are charged and no second action starts for the texture.
  EXPECT_EQ(p.stats().committed_bytes,
            p.chain_bytes_from(t, tail) + p.chain_bytes_from(t, tail - 1));
  p.begin_frame();
  p.request(t, 1.7f, 1000);
  EXPECT_TRUE(p.plan_frame().empty());
  EXPECT_EQ(p.resident_first_level(t), tail);  // the frame samples what is resident
  p.complete(a[0]);
  EXPECT_EQ(p.stats().committed_bytes, p.chain_bytes_from(t, tail - 1));
  settle(p, [&] { p.request(t, 1.7f, 1000); });
  EXPECT_EQ(p.resident_first_level(t), 1);  // floor(1.7)
  EXPECT_EQ(p.wanted_level(t), 1);
}

TEST(MipResidencyPolicy, BudgetGoesToTheHighestPriority) {
  // Room for one texture at full resolution while its old chain still exists and the other at its
  // tail (level 2): the second can then reach level 1, not 0.
  mip_residency_policy probe(options_with_budget(1ull << 40));
  const int ref = probe.add_texture(bc1_1024);
  ASSERT_EQ(probe.tail_level(ref), 2);
  const std::uint64_t budget = probe.chain_bytes_from(ref, 0) + probe.chain_bytes_from(ref, 1) +
                               probe.chain_bytes_from(ref, 2);
  mip_residency_policy p(options_with_budget(budget));
  const int big = p.add_texture(bc1_1024);
  const int small = p.add_texture(bc1_1024);
  settle(p, [&] {
    p.request(big, 0.0f, 500000);
    p.request(small, 0.0f, 100);
  });
  EXPECT_EQ(p.resident_first_level(big), 0);
  EXPECT_EQ(p.resident_first_level(small), 1);
  EXPECT_LE(p.stats().committed_bytes, budget);
  EXPECT_GT(p.stats().starved_requests, 0u);
  EXPECT_GT(p.stats().frames_with_deficit, 0u);
}

TEST(MipResidencyPolicy, DropsUnwantedFineMipsFirstAndNeverTheTail) {
  mip_residency_policy probe(options_with_budget(1ull << 40));
  const int ref = probe.add_texture(bc1_1024);
  // One texture at full resolution plus the transient of its last load, the others at their tails.
  const std::uint64_t budget = probe.chain_bytes_from(ref, 0) + probe.chain_bytes_from(ref, 1) +
                               2 * probe.chain_bytes_from(ref, 2);
  auto o = options_with_budget(budget);
  o.keep_frames = 2;
  mip_residency_policy p(o);
  const int a = p.add_texture(bc1_1024);
  const int b = p.add_texture(bc1_1024);
  const int c = p.add_texture(bc1_1024);
  settle(p, [&] {
    p.request(a, 0.0f, 10000);
    p.request(c, 2.0f, 10);
  });
  ASSERT_EQ(p.resident_first_level(a), 0);
  // The camera turns: b is now what matters, a is out of view; a's fine levels go before c's.
  int frames = 0;
  settle(p, [&] {
    ++frames;
    p.request(b, 0.0f, 10000);
    p.request(c, 2.0f, 10);
  });
  EXPECT_EQ(p.resident_first_level(b), 0);
  EXPECT_EQ(p.resident_first_level(c), 2);
  EXPECT_GT(p.resident_first_level(a), 0);
  EXPECT_LE(p.resident_first_level(a), p.tail_level(a));
  EXPECT_GT(p.stats().drops_started, 0u);
  // Nobody requests anything: levels stay (no pressure), and the tails are never dropped.
  settle(p, [] {});
  for (int t : {a, b, c}) EXPECT_LE(p.resident_first_level(t), p.tail_level(t));
}

TEST(MipResidencyPolicy, InflightLimitDefersLoads) {
  auto o = options_with_budget(1ull << 30);
  o.max_inflight_bytes = 1;  // one load at a time
  mip_residency_policy p(o);
  const int a = p.add_texture(bc1_1024);
  const int b = p.add_texture(bc1_1024);
  p.begin_frame();
  p.request(a, 0.0f, 10);
  p.request(b, 0.0f, 20);
  const auto actions = p.plan_frame();
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].texture, b);  // more coverage first
  EXPECT_EQ(p.stats().starved_requests, 1u);
  EXPECT_THROW(p.complete({residency_action_kind::load_finer, a, 3}), logic_error);
}

// --- the streamer on the simulated device
// ---------------------------------------------------------

texture_image random_bc1(int size, std::uint32_t seed) {
  texture_image img;
  img.info.format = pixel_format::of(tf::bc1);
  img.info.width = img.info.height = size;
  img.info.mip_levels = full_mip_levels(size, size);
  img.info.data_bytes = chain_bytes(img.info.format, size, size, img.info.mip_levels);
  img.data = testing::random_bytes(img.info.data_bytes, seed);
  return img;
}

TEST(MipStreamer, StreamsFileBytesIntoChainsWithoutWaitingInAFrame) {
  testing::temp_dir dir;
  auto dev = std::make_shared<host_sim_device>(
      host_sim_options{.device_memory_bytes = 64 << 20,
                       .copy_bandwidth_bytes_per_s = 8e9,
                       .copy_latency = std::chrono::microseconds(200)});
  device_api_mip_storage storage(*dev);
  std::vector<texture_image> images;
  for (int i = 0; i < 4; ++i) {
    images.push_back(random_bc1(2048, 100 + i));
    write_dds(dir / ("t" + std::to_string(i) + ".dds"), images.back());
  }
  mip_residency_policy probe(options_with_budget(1ull << 40));
  const int ref = probe.add_texture({pixel_format::of(tf::bc1), 2048, 2048, 12});
  ASSERT_EQ(probe.tail_level(ref), 3);
  mip_streamer_options o;
  // Two textures at full resolution, the others at level 2, and room for the old chain of the last
  // load.
  o.policy.budget_bytes = 2 * probe.chain_bytes_from(ref, 0) + 2 * probe.chain_bytes_from(ref, 2) +
                          probe.chain_bytes_from(ref, 1);
  mip_streamer s(dev, storage, o);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.add_texture(dir / ("t" + std::to_string(i) + ".dds")), i);
  owned_stream render(*dev);
  const auto before = s.stats().bytes_streamed;
  // First frame: actions start but the frame sees the tails; the update does not wait for them.
  s.begin_frame();
  for (int i = 0; i < 4; ++i) s.request(i, i < 2 ? 0.0f : 2.0f, i < 2 ? 1e5 : 1e3);
  s.update(render);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.first_level(i), s.policy().tail_level(i));
  for (int f = 0; f < 400; ++f) {
    s.begin_frame();
    for (int i = 0; i < 4; ++i) s.request(i, i < 2 ? 0.0f : 2.0f, i < 2 ? 1e5 : 1e3);
    s.update(render);
    if (f % 20 == 19) s.drain(render);
  }
  s.drain(render);
  EXPECT_EQ(s.first_level(0), 0);
  EXPECT_EQ(s.first_level(1), 0);
  EXPECT_EQ(s.first_level(2), 2);
  EXPECT_EQ(s.first_level(3), 2);
  EXPECT_LE(dev->counters().device_bytes_peak, o.policy.budget_bytes);
  const auto st = s.stats();
  EXPECT_GT(st.bytes_streamed, before);
  EXPECT_EQ(st.policy.pending_actions, 0u);
  // Every resident level holds exactly the file's bytes.
  for (int i = 0; i < 4; ++i) {
    const auto* chain = s.chain(i);
    for (int l = s.first_level(i); l < images[i].info.mip_levels; ++l) {
      const auto expect = images[i].level(0, l);
      std::vector<std::uint8_t> got(expect.size());
      dev->copy_async(got.data(), storage.level_data(chain, l), got.size(),
                      copy_kind::device_to_host, render);
      dev->synchronize(render);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), expect.begin()))
          << "texture " << i << " level " << l;
    }
    const auto r = s.residency(i);
    EXPECT_EQ(r.level_bytes.size(), 12u);
    EXPECT_EQ(r.level_bytes[0] > 0, i < 2);
  }
}

// Arrays and cube maps stream whole levels: each resident level holds every layer's bytes of the
// file, layer after layer.
TEST(MipStreamer, StreamsArraysAndCubeMapsLayerByLayer) {
  testing::temp_dir dir;
  auto dev = std::make_shared<host_sim_device>();
  device_api_mip_storage storage(*dev);
  struct layered {
    const char* name;
    int size, array_layers, faces;
  };
  const layered cases[] = {
      {"array.dds", 256, 3, 1}, {"cube.dds", 128, 1, 6}, {"cubes.dds", 64, 2, 6}};
  std::vector<texture_image> images;
  for (const auto& c : cases) {
    auto img = random_bc1(c.size, 7 + static_cast<std::uint32_t>(images.size()));
    img.info.array_layers = c.array_layers;
    img.info.faces = c.faces;
    img.info.data_bytes *= static_cast<std::uint64_t>(c.array_layers * c.faces);
    img.data =
        testing::random_bytes(img.info.data_bytes, 30 + static_cast<std::uint32_t>(images.size()));
    write_dds(dir / c.name, img);
    images.push_back(std::move(img));
  }
  mip_streamer_options o;
  o.policy.budget_bytes = 16 << 20;
  mip_streamer s(dev, storage, o);
  for (const auto& c : cases) s.add_texture(dir / c.name);
  EXPECT_EQ(s.policy().desc(2).layers, 12);
  EXPECT_TRUE(s.policy().desc(1).cube);
  EXPECT_FALSE(s.policy().desc(0).cube);
  owned_stream render(*dev);
  for (int f = 0; f < 100; ++f) {
    s.begin_frame();
    for (int i = 0; i < 3; ++i) s.request(i, 0.0f, 1e4);
    s.update(render);
  }
  s.drain(render);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(s.first_level(i), 0) << cases[i].name;
    const auto& img = images[static_cast<std::size_t>(i)];
    const auto* chain = s.chain(i);
    for (int l = 0; l < img.info.mip_levels; ++l) {
      std::vector<std::uint8_t> expect;
      for (int layer = 0; layer < img.info.surfaces(); ++layer) {
        const auto part = img.level(layer, l);
        expect.insert(expect.end(), part.begin(), part.end());
      }
      std::vector<std::uint8_t> got(expect.size());
      dev->copy_async(got.data(), storage.level_data(chain, l), got.size(),
                      copy_kind::device_to_host, render);
      dev->synchronize(render);
      EXPECT_EQ(got, expect) << cases[i].name << " level " << l;
    }
    EXPECT_EQ(s.residency(i).level_bytes[0], img.info.level_size(0) * img.info.surfaces());
  }
}

TEST(MipStreamer, RejectsWhatItCannotStream) {
  testing::temp_dir dir;
  auto dev = std::make_shared<host_sim_device>();
  device_api_mip_storage storage(*dev);
  mip_streamer_options o;
  o.policy.budget_bytes = 16 << 20;
  mip_streamer s(dev, storage, o);
  write_png_rgba8(dir / "flat.png", 4, 4, std::vector<std::uint8_t>(64, 200));
  EXPECT_THROW(s.add_texture(dir / "flat.png"), texture_file_error);
  EXPECT_THROW(s.add_texture(dir / "missing.dds"), texture_file_error);
  testing::write_all(dir / "short.dds", {});
  EXPECT_THROW(s.add_texture(dir / "short.dds"), texture_file_error);
  EXPECT_EQ(s.texture_count(), 0);
  mip_streamer_options bad = o;
  bad.upload_streams = 0;
  EXPECT_THROW((mip_streamer{dev, storage, bad}), invalid_input);
}

}  // namespace
}  // namespace vramkit::texture
