#!/usr/bin/env python3
"""GPU test of libvramkit_torch.so's out-of-memory path: with the pool capped by
vramkit_torch.set_pool_maximum, an allocation past the cap raises torch.OutOfMemoryError whose
message holds vramkit's summary (never a crash, never a tensor without memory); the process goes on
allocating and computing correctly afterwards, and last_error() keeps the text.

    python3 tests/gpu/mr/torch_oom_test.py LIB pool|vmm
Exit 0 pass, 1 fail, 77 skip (no torch or no GPU; a failure under VRAMKIT_REQUIRE_GPU=1).
"""
import sys

from torch_test_support import cuda_torch, fail

MIB = 1 << 20


def main():
    lib, kind = sys.argv[1], sys.argv[2]
    torch, code = cuda_torch()
    if torch is None:
        return code
    import vramkit_torch

    vramkit_torch.set_pool_kind(kind)
    vramkit_torch.set_pool_maximum("1GiB")
    vramkit_torch.use_vramkit_allocator(lib)
    a = torch.full((256 * MIB,), 3, dtype=torch.uint8, device="cuda")
    try:
        b = torch.empty(2048 * MIB, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        msg = str(e)
    except RuntimeError as e:
        return fail("RuntimeError instead of torch.OutOfMemoryError: %s" % str(e)[:2000])
    else:
        return fail("a 2 GiB tensor was created past a 1 GiB maximum (data_ptr %#x)" % b.data_ptr())
    for needle in ("out of memory", "2147483648 bytes", "vramkit memory summary"):
        if needle not in msg:
            return fail("%r missing from the error message:\n%s" % (needle, msg[:3000]))
    if "vramkit memory summary" not in vramkit_torch.last_error():
        return fail("last_error() lacks the summary: %r" % vramkit_torch.last_error()[:500])
    # The same inside an operator (matmul's output) rather than a factory function.
    x = torch.ones(16384, 4096, device="cuda", dtype=torch.float16)  # 128 MiB
    try:
        y = x @ x.t()  # 512 MiB output on top of ~384 MiB held: past 1 GiB with the workspace
        del y
        y2 = torch.cat([x] * 8)  # 1 GiB output
        return fail("an operator allocated past the maximum (%d bytes)" % y2.numel())
    except torch.OutOfMemoryError:
        pass
    # The checks themselves stay far below the cap: about 392 MiB is held here, and a reduction of
    # the whole 256 MiB uint8 tensor to int64 would first make a 2 GiB int64 copy of it. Summed in
    # 8 MiB chunks, each temporary is 64 MiB.
    c = torch.arange(1 << 20, device="cuda", dtype=torch.int64)  # 8 MiB
    c_sum = int(c.sum().item())
    a_sum = sum(int(part.sum(dtype=torch.int64).item()) for part in a.split(8 * MIB))
    a_min, a_max = int(a.min().item()), int(a.max().item())
    if c_sum != (1 << 20) * ((1 << 20) - 1) // 2:
        return fail("arange sum %d after the out-of-memory error" % c_sum)
    if a_sum != 3 * 256 * MIB or a_min != 3 or a_max != 3:
        return fail("the tensor made before the error changed: sum %d, min %d, max %d" % (a_sum, a_min, a_max))
    if float(x.min().item()) != 1.0 or float(x.max().item()) != 1.0:
        return fail("the matmul input changed after the out-of-memory error")
    del a, c, x
    torch.cuda.synchronize()
    stats = vramkit_torch.memory_stats()
    if stats.get("num_ooms", 0) < 2:
        return fail("num_ooms %r, expected at least 2" % stats.get("num_ooms"))
    print("ok (%s): torch.OutOfMemoryError with the summary (%d characters), num_ooms %d" % (
        kind, len(msg), stats["num_ooms"]))
    print(msg.splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
