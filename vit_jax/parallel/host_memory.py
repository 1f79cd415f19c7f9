"""The host's memory allocator when the devices are the host's CPU cores.

XLA's CPU runtime allocates each execution's temporaries (130 MB for the quickstart's train
step) with malloc and frees them after it. glibc serves blocks above 32 MB with a fresh
mmap and returns them with munmap, so every step faults the whole block in again, page by
page (32,000 page faults and about 80 ms of kernel time per quickstart step on 2 cores).
Served from the heap and kept there, the same memory is reused from step to step.
"""
import ctypes
import ctypes.util
import importlib.metadata
import importlib.util
import os
import sys

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_KEEP_BYTES = 2**31 - 1  # freed heap memory kept up to this much (mallopt takes an int)


def host_is_device() -> bool:
  """Whether JAX will compute on the host CPU: JAX_PLATFORMS says cpu, or no accelerator is installed."""
  platforms = os.environ.get('JAX_PLATFORMS', '').strip()
  if platforms:
    return platforms.split(',')[0].strip() == 'cpu'
  if importlib.util.find_spec('libtpu') is not None:
    return False
  # GPU backends are plugins: the jax_plugins namespace package or entry points.
  return (importlib.util.find_spec('jax_plugins') is None and
          not importlib.metadata.entry_points(group='jax_plugins'))


def retain_freed_memory() -> bool:
  """Makes glibc keep freed memory on one heap (no per-step mmap); False where it cannot.

  Call it before JAX starts its CPU backend (its worker threads pick their heap at their
  first allocation), i.e. before the first jax.devices() or computation.
  """
  if not sys.platform.startswith('linux'):
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
    mallopt = libc.mallopt
  except (OSError, AttributeError):  # not glibc (musl, ...): leave its allocator alone
    return False
  # One heap: blocks above 64 MB do not fit the heaps of glibc's other arenas, which
  # would fall back to mmap. No mmap at all, and freed memory kept instead of trimmed.
  return all([mallopt(_M_ARENA_MAX, 1), mallopt(_M_MMAP_MAX, 0),
              mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES)])


def retain_on_cpu() -> bool:
  """On a CPU-only run, keeps XLA's freed temporaries on the heap; whether it did."""
  return host_is_device() and retain_freed_memory()
