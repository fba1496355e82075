#!/usr/bin/env bash
# GPU test of libvramkit_torch.so: a few training steps of a small LLaMA-shaped model under
# PyTorch's allocator and under both vramkit pools, each in a fresh process; the losses must be identical.
# Exit 77 (skip) without torch or a GPU, unless VRAMKIT_REQUIRE_GPU=1 and the GPU is missing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
lib=$1
python3 "$root/bench/mr/torch_train_compare.py" --lib "$lib" --layers 2 --steps 4 --warmup 1 \
  --batch 2 --seq 256 --runs torch,vramkit,vramkit_vmm
rc=$?
if [ $rc -eq 77 ] && [ "${VRAMKIT_REQUIRE_GPU:-0}" = "1" ] && ! python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  python3 -c "import torch" 2>/dev/null && { echo "VRAMKIT_REQUIRE_GPU=1 but PyTorch sees no GPU"; exit 1; }
fi
exit $rc
