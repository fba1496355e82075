# Runs every CTest test labelled gpu (they fail, not skip, when the device is missing here).
set -euo pipefail
cd "$BUILD_DIR"
# The cache sweep's L2 level three times, each in a fresh process (the first on a GPU left idle
# by the build: the case that used to find no L2 plateau), with the figures it read; a failure here
# fails again in the run below. About a second each.
for i in 1 2 3; do
  VRAMKIT_REQUIRE_GPU=1 ./tests/gpu/probe/gpu_probe_tests \
    --gtest_filter=GpuProbe.CacheSweepFindsAnL2Plateau 2>&1 | grep -vE "^(Running main|Note:|\[-+\]|\[==)" || true
done > "$RESULTS_DIR/probe-cache-sweep.txt"
VRAMKIT_REQUIRE_GPU=1 ctest -L gpu --output-on-failure --timeout 300 2>&1 | tee "$RESULTS_DIR/gpu-tests.txt"
