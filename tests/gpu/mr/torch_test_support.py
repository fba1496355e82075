"""What the GPU tests of libvramkit_torch.so share: vramkit_torch on the import path, the exit codes
(0 pass, 1 fail, 77 skip), and the check that PyTorch is there and sees a GPU."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
SKIP = 77


def fail(msg):
    print("FAIL: " + msg)
    return 1


def cuda_torch():
    """(torch, None) when PyTorch imports and sees a GPU; otherwise (None, the exit code): a skip,
    or a failure when VRAMKIT_REQUIRE_GPU=1 and the GPU is missing."""
    try:
        import torch
    except ImportError:
        print("skip: no torch")
        return None, SKIP
    if not torch.cuda.is_available():
        print("skip: PyTorch sees no GPU")
        return None, 1 if os.environ.get("VRAMKIT_REQUIRE_GPU") == "1" else SKIP
    return torch, None
