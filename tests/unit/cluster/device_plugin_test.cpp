// The kubelet device plugin: its decisions on an API-shaped PodList, then `vramkit device-plugin`
// driven as the kubelet drives it, over unix sockets with the test's own gRPC client: a fake
// kubelet's Registration service receives Register, then ListAndWatch, GetPreferredAllocation
// and Allocate; the cap Allocate hands out is then enforced by the vramkit pool (the C API reading
// VRAMKIT_POOL_MAXIMUM): past it the allocation fails, within it it succeeds.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "deviceplugin_v1beta1.grpc.pb.h"
#include "mr/c_api_testing.hpp"
#include "vramkit/cluster/device_plugin.hpp"
#include "vramkit/core/error.hpp"
#include "vramkit/core/host_sim_device.hpp"
#include "vramkit/mr/c_api.h"

namespace vramkit::cluster {
namespace {

namespace dp = ::v1beta1;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::uint64_t GiB = std::uint64_t{1} << 30;
const std::string gpu0 = "GPU-5e8c1a52-7b0d-4c9e-a2f1-0d3b6e9f1c01";
const std::string gpu1 = "GPU-9a41f0c3-2e6b-4d7a-8c15-7f2e0b4d9a02";

std::string data(const std::string& name) {
  return std::string(VRAMKIT_SOURCE_DIR) + "/tests/data/cluster/device_plugin/" + name;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

device_plugin_options node1(std::uint64_t unit = 256 * MiB) {
  device_plugin_options o;
  o.node_name = "gpu-node-1";
  o.unit_bytes = unit;
  return o;
}

TEST(DevicePlugin, AdvertisesOneIdPerUnitOfEachGpu) {
  std::vector<gpu_state> gpus(2);
  gpus[0].uuid = "GPU-a";
  gpus[0].total_bytes = 80 * GiB + 100;
  gpus[1].uuid = "GPU-b";
  gpus[1].total_bytes = 40 * GiB - 1;
  const auto ids = advertised_device_ids(gpus, GiB);
  ASSERT_EQ(ids.size(), 80u + 39u);
  EXPECT_EQ(ids.front(), "GPU-a-0");
  EXPECT_EQ(ids[80], "GPU-b-0");
  EXPECT_THROW((void)advertised_device_ids(gpus, 0), invalid_input);
  gpus[1].uuid.clear();
  EXPECT_THROW((void)advertised_device_ids(gpus, GiB), invalid_input);
}

TEST(DevicePlugin, PreferredAllocationKeepsOneGpu) {
  const std::vector<std::string> avail = {"GPU-a-0", "GPU-b-0", "GPU-b-1", "GPU-a-1", "GPU-b-2"};
  EXPECT_EQ(preferred_device_ids(avail, {}, 3),
            (std::vector<std::string>{"GPU-b-0", "GPU-b-1", "GPU-b-2"}));
  EXPECT_EQ(preferred_device_ids(avail, {"GPU-a-1"}, 2),
            (std::vector<std::string>{"GPU-a-1", "GPU-b-0"}));
  EXPECT_EQ(preferred_device_ids(avail, {}, 9).size(), 5u);
}

TEST(DevicePlugin, FindsTheOldestPodTheExtenderPlacedOnThisNode) {
  const std::string pods = read(data("pods.json"));
  std::set<std::string> done;
  auto a = find_allocation(pods, 4, done, node1());
  ASSERT_TRUE(a);
  // train-b is older than train-a; elsewhere (other node), finished, deleting and not-extender
  // are skipped even though they are older or ask for 4 units too.
  EXPECT_EQ(a->pod_name, "train-b");
  EXPECT_EQ(a->gpu_uuid, gpu0);
  EXPECT_EQ(a->gpu_index, 0);
  EXPECT_EQ(a->container, "main");
  EXPECT_EQ(a->cap_bytes, 4 * 256 * MiB);
  EXPECT_EQ(a->planned_bytes, 900000000U) << "its plan annotation, below the cap";
  done.insert(a->pod_uid + "/" + a->container);
  a = find_allocation(pods, 4, done, node1());
  ASSERT_TRUE(a);
  EXPECT_EQ(a->pod_name, "train-a");
  EXPECT_EQ(a->gpu_uuid, gpu1);
  EXPECT_EQ(a->planned_bytes, a->cap_bytes) << "no plan annotation: the request is the plan";
  done.insert(a->pod_uid + "/" + a->container);
  EXPECT_FALSE(find_allocation(pods, 4, done, node1()));
  // Container "a" of two-containers is in its allocated-containers annotation; "b" is not.
  EXPECT_FALSE(find_allocation(pods, 2, done, node1()));
  a = find_allocation(pods, 6, done, node1());
  ASSERT_TRUE(a);
  EXPECT_EQ(a->pod_name, "two-containers");
  EXPECT_EQ(a->container, "b");
  EXPECT_EQ(a->allocated_before, std::vector<std::string>{"a"});
  EXPECT_EQ(a->planned_bytes, 6 * 256 * MiB) << "two GPU containers: the pod's plan is no one's";
  EXPECT_THROW((void)find_allocation("{\"kind\":\"Pod\"}", 4, done, node1()), invalid_input);
  EXPECT_THROW((void)find_allocation("not json", 4, done, node1()), invalid_input);
}

TEST(DevicePlugin, EnvironmentCarriesTheGpuAndTheCap) {
  allocation a;
  a.gpu_uuid = gpu0;
  a.cap_bytes = 24 * GiB;
  auto o = node1(GiB);
  auto env = allocation_environment(a, 80 * GiB, o);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), gpu0);
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), gpu0);
  EXPECT_EQ(env.at("VRAMKIT_POOL_MAXIMUM"), std::to_string(24 * GiB));
  EXPECT_EQ(env.count("VRAMKIT_PLANNED_BYTES"), 0u);
  EXPECT_EQ(env.at("PYTORCH_CUDA_ALLOC_CONF"), "per_process_memory_fraction:0.3000");
  a.planned_bytes = 20 * GiB;
  EXPECT_EQ(allocation_environment(a, 80 * GiB, o).at("VRAMKIT_PLANNED_BYTES"),
            std::to_string(20 * GiB));
  a.planned_bytes = 0;
  EXPECT_EQ(env.count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), 0u);
  o.mps_limit = true;
  a.cap_bytes = GiB;
  env = allocation_environment(a, 3 * GiB, o);
  EXPECT_EQ(env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=1024M");
  EXPECT_EQ(env.at("PYTORCH_CUDA_ALLOC_CONF"), "per_process_memory_fraction:0.3333");  // never up
}

// The kubelet's side of registration: records the RegisterRequest.
class fake_kubelet final : public dp::Registration::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const dp::RegisterRequest* r, dp::Empty*) override {
    std::lock_guard lock(mutex_);
    requests_.push_back(*r);
    cv_.notify_all();
    return grpc::Status::OK;
  }
  std::optional<dp::RegisterRequest> wait_for(std::size_t n, std::chrono::seconds timeout) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [&] { return requests_.size() >= n; })) return std::nullopt;
    return requests_[n - 1];
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<dp::RegisterRequest> requests_;
};

class PluginOverSockets : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::filesystem::temp_directory_path() /
          ("vramkit-device-plugin." + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    kubelet_socket = (dir / "kubelet.sock").string();
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + kubelet_socket, grpc::InsecureServerCredentials());
    b.RegisterService(&kubelet);
    server = b.BuildAndStart();
    ASSERT_TRUE(server);
  }
  void TearDown() override {
    if (child > 0) {
      ::kill(child, SIGTERM);
      int status = 0;
      ::waitpid(child, &status, 0);
    }
    server->Shutdown();
    std::filesystem::remove_all(dir);
  }
  void start_plugin(std::vector<std::string> extra) {
    std::vector<std::string> args = {std::string(VRAMKIT_BINARY_DIR) + "/vramkit",
                                     "device-plugin",
                                     "--fake-gpus",
                                     data("gpus.json"),
                                     "--pods-file",
                                     data("pods.json"),
                                     "--node",
                                     "gpu-node-1",
                                     "--kubelet-socket",
                                     kubelet_socket,
                                     "--unit",
                                     "256MiB"};
    args.insert(args.end(), extra.begin(), extra.end());
    child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::vector<char*> argv;
      for (auto& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
  }
  std::filesystem::path dir;
  std::string kubelet_socket;
  fake_kubelet kubelet;
  std::unique_ptr<grpc::Server> server;
  pid_t child = -1;
};

TEST_F(PluginOverSockets, RegisterListAllocateAndTheCapHolds) {
  start_plugin({});
  auto reg = kubelet.wait_for(1, std::chrono::seconds(30));
  ASSERT_TRUE(reg) << "the plugin never registered";
  EXPECT_EQ(reg->version(), "v1beta1");
  EXPECT_EQ(reg->resource_name(), "vramkit.io/gpu-memory");
  EXPECT_EQ(reg->endpoint(), "vramkit-gpu-memory.sock");
  EXPECT_TRUE(reg->options().get_preferred_allocation_available());

  auto channel = grpc::CreateChannel("unix://" + (dir / reg->endpoint()).string(),
                                     grpc::InsecureChannelCredentials());
  auto plugin = dp::DevicePlugin::NewStub(channel);
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(10); };
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    dp::Empty e;
    dp::DevicePluginOptions o;
    ASSERT_TRUE(plugin->GetDevicePluginOptions(&ctx, e, &o).ok());
    EXPECT_FALSE(o.pre_start_required());
    EXPECT_TRUE(o.get_preferred_allocation_available());
  }
  std::vector<std::string> ids;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    dp::Empty e;
    auto stream = plugin->ListAndWatch(&ctx, e);
    dp::ListAndWatchResponse r;
    ASSERT_TRUE(stream->Read(&r));
    // 85,520,809,984 B / 256 MiB = 318 IDs, 40 GiB / 256 MiB = 160.
    ASSERT_EQ(r.devices_size(), 318 + 160);
    for (const auto& d : r.devices()) {
      EXPECT_EQ(d.health(), "Healthy");
      EXPECT_LE(d.id().size(), 63u);
      ids.push_back(d.id());
    }
    ctx.TryCancel();
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    dp::PreferredAllocationRequest req;
    auto* c = req.add_container_requests();
    for (const auto& id : ids) c->add_available_deviceids(id);
    c->set_allocation_size(4);
    dp::PreferredAllocationResponse res;
    ASSERT_TRUE(plugin->GetPreferredAllocation(&ctx, req, &res).ok());
    ASSERT_EQ(res.container_responses_size(), 1);
    EXPECT_EQ(res.container_responses(0).deviceids_size(), 4);
  }
  auto allocate = [&](int n, dp::AllocateResponse* res) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    dp::AllocateRequest req;
    auto* c = req.add_container_requests();
    for (int i = 0; i < n; ++i) c->add_devices_ids(ids[static_cast<std::size_t>(i)]);
    return plugin->Allocate(&ctx, req, res);
  };
  dp::AllocateResponse first;
  ASSERT_TRUE(allocate(4, &first).ok());
  ASSERT_EQ(first.container_responses_size(), 1);
  const auto& env = first.container_responses(0).envs();
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), gpu0);  // train-b, the oldest placed pod
  EXPECT_EQ(env.at("VRAMKIT_POOL_MAXIMUM"), std::to_string(GiB));
  EXPECT_EQ(env.at("PYTORCH_CUDA_ALLOC_CONF"), "per_process_memory_fraction:0.0125");
  dp::AllocateResponse second;
  ASSERT_TRUE(allocate(4, &second).ok());
  EXPECT_EQ(second.container_responses(0).envs().at("CUDA_VISIBLE_DEVICES"), gpu1);
  dp::AllocateResponse third;
  const grpc::Status s = allocate(4, &third);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("gpu-node-1"), std::string::npos) << s.error_message();
  dp::AllocateResponse lost;
  EXPECT_EQ(allocate(7, &lost).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // Enforcement: the container's vramkit pool, configured from Allocate's environment.
  ::setenv("VRAMKIT_POOL_MAXIMUM", env.at("VRAMKIT_POOL_MAXIMUM").c_str(), 1);
  host_sim_options ho;
  ho.device_memory_bytes = 16 * GiB;  // the GPU has room: only the cap can refuse
  ho.poison_byte = -1;
  mr::detail::set_c_api_device_api(std::make_shared<host_sim_device>(ho));
  void* within = vramkit_malloc(static_cast<ssize_t>(768 * MiB), 0, nullptr);
  EXPECT_NE(within, nullptr) << "768 MiB within a 1 GiB cap must be given";
  void* past = vramkit_malloc(static_cast<ssize_t>(512 * MiB), 0, nullptr);
  EXPECT_EQ(past, nullptr) << "768 + 512 MiB is past the 1 GiB cap: out of memory";
  vramkit_free(within, static_cast<ssize_t>(768 * MiB), 0, nullptr);
  void* again = vramkit_malloc(static_cast<ssize_t>(512 * MiB), 0, nullptr);
  EXPECT_NE(again, nullptr) << "after the free, 512 MiB fits the cap again";
  vramkit_free(again, static_cast<ssize_t>(512 * MiB), 0, nullptr);
  mr::detail::set_c_api_device_api(nullptr);
  ::unsetenv("VRAMKIT_POOL_MAXIMUM");
}

TEST_F(PluginOverSockets, ReRegistersWhenTheKubeletRemovesItsSocket) {
  start_plugin({"--endpoint", "vk.sock", "--mps-limit"});
  auto reg = kubelet.wait_for(1, std::chrono::seconds(30));
  ASSERT_TRUE(reg);
  EXPECT_EQ(reg->endpoint(), "vk.sock");
  std::filesystem::remove(dir / "vk.sock");  // what a restarting kubelet does
  EXPECT_TRUE(kubelet.wait_for(2, std::chrono::seconds(20))) << "no second registration";
}

TEST(DevicePluginCli, RefusesBadFlags) {
  const std::string bin = std::string(VRAMKIT_BINARY_DIR) + "/vramkit device-plugin";
  auto status = [](const std::string& cmd) {
    const int s = std::system((cmd + " >/dev/null 2>&1").c_str());
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  };
  const std::string gpus = " --fake-gpus " + data("gpus.json");
  EXPECT_EQ(status(bin + gpus), 2);  // neither --api-url nor --pods-file
  EXPECT_EQ(status(bin + gpus + " --pods-file x --api-url http://127.0.0.1:8001"), 2);
  EXPECT_EQ(status(bin + gpus + " --api-url https://api:6443 --node n"), 2);
  EXPECT_EQ(status(bin + gpus + " --api-url http://127.0.0.1:8001"), 2);  // no node name
  EXPECT_EQ(status(bin + gpus + " --pods-file x --unit 4KiB"), 2);
  EXPECT_EQ(status(bin + gpus + " --pods-file x --unit lots"), 2);
  EXPECT_EQ(status(bin + gpus + " --pods-file x --endpoint a/b.sock"), 2);
}

}  // namespace
}  // namespace vramkit::cluster
