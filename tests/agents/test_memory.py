"""agents/memory.py: after keep_freed_memory, glibc serves large tensors from the heap (no
fresh mmap per step) and keeps their pages when they are freed."""

import subprocess
import sys

import pytest

PROBE = r"""
import ctypes, sys, torch
sys.path.insert(0, ".")
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "keep":
    from agents.memory import keep_freed_memory
    assert keep_freed_memory()
before = libc.mallinfo2().hblkhd
x = torch.empty(64 << 20, dtype=torch.uint8)  # a 64 MiB activation
mmapped = libc.mallinfo2().hblkhd - before
del x
kept = libc.mallinfo2().fordblks  # freed bytes the heap still holds
print(mmapped, kept)
"""


def _probe(mode: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_tensors_come_from_the_heap_and_their_pages_stay():
    mmapped, _ = _probe("default")
    assert mmapped >= 64 << 20  # glibc's default: a fresh mapping, unmapped on free
    mmapped, kept = _probe("keep")
    assert mmapped == 0
    assert kept >= 64 << 20  # freed, but still the process's: the next step reuses the pages
