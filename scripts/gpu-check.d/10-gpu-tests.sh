# Runs every CTest test labelled gpu (they fail, not skip, when the device is missing here).
set -euo pipefail
cd "$BUILD_DIR"
VRAMKIT_REQUIRE_GPU=1 ctest -L gpu --output-on-failure --timeout 300 2>&1 | tee "$RESULTS_DIR/gpu-tests.txt"
