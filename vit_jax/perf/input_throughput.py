"""The input pipeline's throughput, for `python -m vit_jax.perf.data_benchmark`."""
import os
import time

import ml_collections

from vit_jax.data import pipeline


def cpu_cores() -> int:
  """Returns the number of CPU cores this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not on Linux.
    return os.cpu_count() or 1


def measure(config, steps: int, warmup: int) -> tuple[float, float, float]:
  """Returns (images/sec, images per CPU-second, seconds to the first batch)."""
  start = time.perf_counter()
  batches = pipeline.train_dataset(config, list(range(config.data_shards)))
  it = batches.as_numpy_iterator()
  next(it)
  first = time.perf_counter() - start
  for _ in range(warmup):
    next(it)
  start, cpu_start = time.perf_counter(), time.process_time()
  for _ in range(steps):
    next(it)
  images = steps * config.batch
  return (images / (time.perf_counter() - start),
          images / (time.process_time() - cpu_start), first)


def report(config: ml_collections.ConfigDict, steps: int, warmup: int) -> None:
  """Times config's training pipeline and prints images/sec overall and per core."""
  rate, per_cpu_second, first = measure(config, steps, warmup)
  cores = cpu_cores()
  print(f'dataset={config.dataset} recipe={config.pp.train} crop={config.pp.crop} '
        f'batch={config.batch} steps={steps}')
  print(f'first batch after {first:.1f} s')
  print(f'{rate:.0f} images/sec on {cores} cores = {rate / cores:.0f} images/sec/core (wall)')
  print(f'{per_cpu_second:.0f} images per CPU-second (all threads): '
        f'x16 cores = {16 * per_cpu_second:.0f} images/sec')
