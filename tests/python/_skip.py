"""Exit code 77 (CTest's SKIP_RETURN_CODE) when torch is not importable, or when a GPU test finds
no CUDA device and VRAMKIT_REQUIRE_GPU is unset (with it set, a missing device is a failure)."""

import os
import sys


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: torch is not importable by %s" % sys.executable)
        sys.exit(77)


def need_cuda():
    need_torch()
    import torch

    if not torch.cuda.is_available():
        if os.environ.get("VRAMKIT_REQUIRE_GPU") == "1":
            print("FAIL: VRAMKIT_REQUIRE_GPU=1 but torch sees no CUDA device")
            sys.exit(1)
        print("SKIP: no CUDA device")
        sys.exit(77)
