"""What checkpoint verification costs: seconds per GB to write and to check the CRC32 manifest.

  python -m vit_jax.perf.checkpoint_verify --gb=1 --dir=/tmp/verify_cost

saves a train-state-like checkpoint of --gb GB of random float32 arrays with the
trainer's checkpointer, then times, each in seconds per GB: writing the manifest,
verifying it with the files in the page cache (warm; a resume right after the run), and
verifying after the files were evicted from the page cache (cold; a resume after a
reboot or on another machine), and an orbax restore (warm) for comparison. The
checkpoint is deleted at the end.
"""
import os
import shutil
import time
from typing import Sequence

from absl import app
from absl import flags
from absl import logging
import jax
import numpy as np

from vit_jax import errors
from vit_jax.train import checkpointer
from vit_jax.train import integrity

_GB = flags.DEFINE_float('gb', 1.0, 'Checkpoint size in GB (10^9 bytes).')
_DIR = flags.DEFINE_string('dir', '/tmp/vit_jax_verify_cost',
                           'Scratch workdir: a new or empty directory, deleted at '
                           'the end.')
_ARRAY_BYTES = 64 * 2**20


def _evict(directory: str) -> None:
  """Drops the files below `directory` from the page cache (this process's files only)."""
  for root, _, files in os.walk(directory):
    for f in files:
      fd = os.open(os.path.join(root, f), os.O_RDONLY)
      try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
      finally:
        os.close(fd)


def _timed(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def measure(workdir: str, gb: float) -> dict[str, float]:
  """Seconds per GB of manifest write, warm and cold verify and a warm restore."""
  rng = np.random.default_rng(0)
  n = max(1, round(gb * 1e9 / _ARRAY_BYTES))
  size = min(_ARRAY_BYTES, int(gb * 1e9)) // 4
  state = {f'w{i:03d}': rng.standard_normal(size, np.float32) for i in range(n)}
  ckpt = checkpointer.StateCheckpointer(workdir, keep=1, async_save=False)
  ckpt.save(1, state)
  ckpt.close()
  step_dir = os.path.join(ckpt.directory, '1')
  nbytes = integrity.write_manifest(step_dir)
  per_gb = 1e9 / nbytes
  out = {'gb': nbytes / 1e9,
         'manifest_s_per_gb': _timed(lambda: integrity.write_manifest(step_dir)) * per_gb}
  assert integrity.verify(step_dir) is None
  out['verify_warm_s_per_gb'] = _timed(lambda: integrity.verify(step_dir)) * per_gb
  _evict(step_dir)
  out['verify_cold_s_per_gb'] = _timed(lambda: integrity.verify(step_dir)) * per_gb
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
  reader = checkpointer.StateCheckpointer(workdir, keep=1, async_save=False,
                                          verify=False)
  out['restore_warm_s_per_gb'] = _timed(
      lambda: jax.block_until_ready(reader.restore_latest(abstract))) * per_gb
  reader.close()
  return out


def main(argv: Sequence[str]) -> None:
  """Prints the measured costs."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)  # orbax logs every step of a save
  if os.path.exists(_DIR.value) and (not os.path.isdir(_DIR.value) or os.listdir(_DIR.value)):
    # It is deleted at the end: never a directory that holds someone's files.
    raise ValueError(f'--dir={_DIR.value} exists and is not an empty directory; '
                     'pass a new path for the scratch checkpoint.')
  try:
    result = measure(_DIR.value, _GB.value)
  finally:
    shutil.rmtree(_DIR.value, ignore_errors=True)
  print(f'checkpoint of {result["gb"]:.2f} GB in {_DIR.value}:')
  for key in ('manifest', 'verify_warm', 'verify_cold', 'restore_warm'):
    print(f'  {key:13s} {result[key + "_s_per_gb"]:.2f} s/GB')


if __name__ == '__main__':
  # Its flags are defined above, at import.
  errors.run_command('vit_jax.perf.checkpoint_verify', lambda: None, main)
