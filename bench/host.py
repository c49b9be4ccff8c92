"""What the benchmarks ask about the host they run on."""


def native_bf16():
    """Whether the CPU has bf16 arithmetic (AVX-512 BF16 or AMX). Without it, bf16 matrix
    products fall back to slow kernels in torch and in Loom alike: a bf16 step of ResNet-18 at
    64x64 took minutes on an AVX2 EPYC, so the benchmarks time fp32 there instead."""
    with open("/proc/cpuinfo") as f:
        flags = set(next((line for line in f if line.startswith("flags")), "").split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})
