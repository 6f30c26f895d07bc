"""Keep the memory a CPU step frees, instead of handing it back to the kernel.

glibc serves every allocation above its mmap threshold (128 KiB, growing to at most 32 MiB)
with a fresh `mmap` and unmaps it on `free`. A training step allocates and frees the same
large tensors every time (activations, gradients, logits, optimizer temporaries), so each
step touches fresh pages and the kernel page-faults them in one by one. On a 2-core VM that
was over a third of a SmolLM2 forward + backward (`benchmarks/grpo_step.py --phases`:
2.8 s -> 1.7 s, docs/benchmarks.md). PyTorch's CPU performance guide swaps in jemalloc or
tcmalloc for the same reason; `mallopt` gets glibc to do it without another library: large
blocks come from the heap, and freed memory stays there for the next step.

The cost is that a process keeps its high-water mark of heap memory until it exits, which
is what a learner or an engine that runs the same step again and again wants anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_done = False


def keep_freed_memory() -> bool:
    """Tell glibc to serve large blocks from the heap and keep what is freed there (once per
    process). False where the C library is not glibc (macOS, musl): nothing changes."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl has mallopt as a stub)
    except (OSError, AttributeError):
        return False
    _done = bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    return _done
