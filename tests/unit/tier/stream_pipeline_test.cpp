// stream_pipeline over the simulated device with artificial copy delays: every depth gives the
// same bytes, files and host arrays work both ways, bad input and failing callbacks give clear
// errors and release every buffer.
#include "vramkit/tier/stream_pipeline.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <vector>

#include "tier_test_support.hpp"
#include "vramkit/core/error.hpp"

namespace vramkit::tier {
namespace {

using testing::sim_setup;

std::vector<std::uint32_t> make_input(std::size_t words) {
  std::vector<std::uint32_t> v(words);
  for (std::size_t i = 0; i < words; ++i) v[i] = static_cast<std::uint32_t>(i * 2654435761u + 17);
  return v;
}

std::uint32_t mix(std::uint32_t x, std::size_t index) {
  return x * 5u + static_cast<std::uint32_t>(index);
}

// The "kernel": a host function on the compute stream that transforms the chunk in device memory.
chunk_callback mixing_callback(device_api& api) {
  return [&api](chunk_view c, stream_view s) {
    api.launch_host_func(s, [c] {
      auto* d = static_cast<std::uint32_t*>(c.data);
      for (std::size_t i = 0; i < c.bytes / 4; ++i) d[i] = mix(d[i], c.offset / 4 + i);
    });
  };
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("vramkit_tier_" + std::to_string(::getpid()) + "_" + name);
}

// A fresh simulated device and (pipeline) a stream pipeline over its counted memory.
// NOLINTNEXTLINE(readability-identifier-naming): GoogleTest names the suite after the fixture.
class StreamPipeline : public ::testing::Test {
 protected:
  sim_setup sim;

  stream_pipeline& pipeline(pipeline_options options) {
    return pipeline_.emplace(*sim.device, *sim.device_memory, *sim.pinned_memory, options);
  }

 private:
  std::optional<stream_pipeline> pipeline_;
};

TEST_F(StreamPipeline, DepthsOneTwoAndFourGiveIdenticalResults) {
  const std::size_t words = (1 << 18) + 250;  // 1 MiB and a partial chunk
  const auto input = make_input(words);
  std::vector<std::uint32_t> expected(words);
  for (std::size_t i = 0; i < words; ++i) expected[i] = mix(input[i], i);
  for (int depth : {1, 2, 4}) {
    sim_setup sim;
    stream_pipeline p(
        *sim.device, *sim.device_memory, *sim.pinned_memory,
        {.chunk_bytes = 64 * KiB, .depth = depth, .element_bytes = 4, .staging_threads = 3});
    std::vector<std::uint32_t> out(words, 0);
    std::vector<std::size_t> seen;
    auto cb = mixing_callback(*sim.device);
    const auto st = p.run(
        pipeline_input::from_host(input.data(), words * 4),
        [&](chunk_view c, stream_view s) {
          seen.push_back(c.index);
          EXPECT_EQ(c.offset, c.index * 64 * KiB);
          cb(c, s);
        },
        pipeline_output::to_host(out.data(), words * 4));
    ASSERT_EQ(0, std::memcmp(out.data(), expected.data(), words * 4)) << "depth " << depth;
    const std::size_t chunks = (words * 4 + 64 * KiB - 1) / (64 * KiB);
    EXPECT_EQ(st.chunks, chunks);
    EXPECT_EQ(seen.size(), chunks);
    EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
    EXPECT_EQ(st.bytes, words * 4);
    EXPECT_EQ(st.read.bytes, words * 4);
    EXPECT_EQ(st.h2d.bytes, words * 4);
    EXPECT_EQ(st.compute.bytes, words * 4);
    EXPECT_EQ(st.d2h.bytes, words * 4);
    EXPECT_EQ(st.write.bytes, words * 4);
    EXPECT_GT(st.h2d.busy.count(), 0);
    EXPECT_LE(sim.device_peak(), static_cast<std::int64_t>(depth * (64 * KiB))) << "device budget";
  }
}

TEST_F(StreamPipeline, FileToFileMatchesTheHostReference) {
  const std::size_t words = 100'000;
  const auto input = make_input(words);
  const auto in_path = temp_file("in.bin");
  const auto out_path = temp_file("out.bin");
  std::ofstream(in_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(input.data()), words * 4);
  auto& p = pipeline({.chunk_bytes = 48 * KiB, .depth = 3, .element_bytes = 4});
  const auto st = p.run(pipeline_input::from_file(in_path.string()), mixing_callback(*sim.device),
                        pipeline_output::to_file(out_path.string()));
  EXPECT_EQ(st.bytes, words * 4);
  std::vector<std::uint32_t> out(words);
  std::ifstream f(out_path, std::ios::binary);
  f.read(reinterpret_cast<char*>(out.data()), words * 4);
  ASSERT_EQ(static_cast<std::size_t>(f.gcount()), words * 4);
  for (std::size_t i = 0; i < words; ++i) ASSERT_EQ(out[i], mix(input[i], i)) << i;
  EXPECT_EQ(std::filesystem::file_size(out_path), words * 4);
  std::filesystem::remove(in_path);
  std::filesystem::remove(out_path);
}

TEST_F(StreamPipeline, PinnedHostArrayIsTransformedInPlaceWithoutStaging) {
  const std::size_t words = 50'000;
  auto data = make_input(words);
  const auto input = data;
  auto& p = pipeline({.chunk_bytes = 32 * KiB, .depth = 2, .element_bytes = 4});
  const auto st = p.run(pipeline_input::from_host(data.data(), words * 4, host_memory::pinned),
                        mixing_callback(*sim.device),
                        pipeline_output::to_host(data.data(), words * 4, host_memory::pinned));
  for (std::size_t i = 0; i < words; ++i) ASSERT_EQ(data[i], mix(input[i], i)) << i;
  EXPECT_EQ(st.read.bytes, 0u);  // no staging copy
  EXPECT_EQ(st.write.bytes, 0u);
  EXPECT_EQ(sim.pinned_current(), 0) << "no pinned staging buffers were needed";
}

TEST_F(StreamPipeline, ReductionWithoutOutputSeesEveryByteOnce) {
  const std::size_t words = 300'001;
  const auto input = make_input(words);
  const std::uint64_t expected = std::accumulate(input.begin(), input.end(), std::uint64_t{0});
  auto& p = pipeline({.chunk_bytes = 40 * KiB, .depth = 2, .element_bytes = 4});
  std::uint64_t sum = 0;  // written only by host functions on the (serial) compute stream
  p.run(pipeline_input::from_host(input.data(), words * 4), [&](chunk_view c, stream_view s) {
    sim.device->launch_host_func(s, [c, &sum] {
      const auto* d = static_cast<const std::uint32_t*>(c.data);
      for (std::size_t i = 0; i < c.bytes / 4; ++i) sum += d[i];
    });
  });
  EXPECT_EQ(sum, expected);
}

TEST_F(StreamPipeline, TruncatedInputFilesAreRejectedWithTheReason) {
  const auto path = temp_file("odd.bin");
  std::vector<char> bytes(1001, 'x');
  std::ofstream(path, std::ios::binary).write(bytes.data(), 1001);
  auto& p = pipeline({.chunk_bytes = 256, .depth = 2, .element_bytes = 4});
  auto noop = [](chunk_view, stream_view) {};
  try {
    p.run(pipeline_input::from_file(path.string()), noop);
    FAIL() << "no exception";
  } catch (const invalid_input& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("truncated"), std::string::npos) << what;
    EXPECT_NE(what.find("4-byte elements"), std::string::npos) << what;
  }
  try {
    p.run(pipeline_input::from_file(path.string(), 4000), noop);
    FAIL() << "no exception";
  } catch (const invalid_input& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("1001 bytes, 4000 declared"), std::string::npos) << what;
  }
  EXPECT_THROW(p.run(pipeline_input::from_file(temp_file("missing.bin").string()), noop),
               invalid_input);
  std::filesystem::remove(path);
  // A declared size shorter than the file reads only the declared bytes.
  EXPECT_EQ(sim.device_current(), 0);
}

TEST_F(StreamPipeline, FailingCallbackNamesTheChunkAndReleasesEveryBuffer) {
  const std::size_t words = std::size_t{64} * 1024;
  const auto input = make_input(words);
  auto& p = pipeline({.chunk_bytes = 16 * KiB, .depth = 3, .element_bytes = 4});
  std::vector<std::uint32_t> out(words);
  try {
    p.run(
        pipeline_input::from_host(input.data(), words * 4),
        [](chunk_view c, stream_view) {
          if (c.index == 7) throw std::runtime_error("kernel launch failed");
        },
        pipeline_output::to_host(out.data(), words * 4));
    FAIL() << "no exception";
  } catch (const error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("chunk 7"), std::string::npos) << what;
    EXPECT_NE(what.find("kernel launch failed"), std::string::npos) << what;
  }
  EXPECT_EQ(sim.device_current(), 0) << "device buffers released";
  EXPECT_EQ(sim.pinned_current(), 0) << "pinned staging released";
  // The pipeline is usable again.
  p.run(pipeline_input::from_host(input.data(), words * 4), mixing_callback(*sim.device),
        pipeline_output::to_host(out.data(), words * 4));
  for (std::size_t i = 0; i < words; ++i) ASSERT_EQ(out[i], mix(input[i], i));
}

TEST_F(StreamPipeline, BadOptionsAndOutputsAreUsageErrors) {
  host_sim_device dev;
  EXPECT_THROW(stream_pipeline(dev, {.chunk_bytes = 1024, .depth = 0}), invalid_input);
  EXPECT_THROW(stream_pipeline(dev, {.chunk_bytes = 1022, .depth = 2, .element_bytes = 4}),
               invalid_input);
  EXPECT_THROW(stream_pipeline(dev, {.chunk_bytes = 0}), invalid_input);
  stream_pipeline p(dev, {.chunk_bytes = 1024, .depth = 2, .element_bytes = 4});
  std::vector<std::uint32_t> in(1000), out(10);
  auto noop = [](chunk_view, stream_view) {};
  EXPECT_THROW(p.run(pipeline_input::from_host(in.data(), 4000), noop,
                     pipeline_output::to_host(out.data(), 40)),
               invalid_input);
  EXPECT_THROW(p.run(pipeline_input::from_host(in.data(), 3999), noop), invalid_input);
  EXPECT_THROW(p.run(pipeline_input::from_host(in.data(), 4000), chunk_callback{}), invalid_input);
  const auto st = p.run(pipeline_input::from_host(in.data(), 0), noop);
  EXPECT_EQ(st.chunks, 0u);
}

TEST_F(StreamPipeline, StatsShowReadAndCopyStages) {
  const std::size_t words = std::size_t{256} * 1024;
  const auto input = make_input(words);
  auto& p = pipeline({.chunk_bytes = 64 * KiB, .depth = 2, .element_bytes = 4});
  const auto st =
      p.run(pipeline_input::from_host(input.data(), words * 4), [](chunk_view, stream_view) {});
  EXPECT_EQ(st.chunks, 16u);
  // 16 copies of 64 KiB at 2 GB/s + 20 us: at least ~0.8 ms of copying.
  EXPECT_GT(st.h2d.busy.count(), 800'000);
  EXPECT_GT(st.read.busy.count(), 0);
  EXPECT_GT(st.elapsed.count(), st.h2d.busy.count() / 2);
  EXPECT_GT(st.bytes_per_second(), 0.0);
}

}  // namespace
}  // namespace vramkit::tier
