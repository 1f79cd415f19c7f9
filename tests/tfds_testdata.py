"""Test data shared by the data tests of one pytest session: a TFDS data dir and image folders.

The embedded datasets are prepared once per session into a temporary data dir (removed at
exit), through the same tfds.builder / download_and_prepare path users take.
"""
import atexit
import functools
import io
import os
import shutil
import tempfile

import numpy as np
from PIL import Image

from vit_jax.configs import base


@functools.cache
def data_dir() -> str:
  """Returns this session's temporary TFDS data dir, shared by the xdist workers.

  conftest.py names the session directory; run without it (a file as a script), a
  directory of this process. Preparation is serialised by the data stage's own lock.
  """
  session = os.environ.get('VITJAX_TEST_SESSION_DIR')
  if not session:
    session = tempfile.mkdtemp(prefix='vit_jax_tfds_')
    atexit.register(shutil.rmtree, session, ignore_errors=True)
  path = os.path.join(session, 'tfds')
  os.makedirs(path, exist_ok=True)
  return path


def tempdir(test, name: str = '') -> str:
  """Returns a new temporary directory removed when `test` ends (works under pytest)."""
  path = tempfile.mkdtemp(prefix='vit_jax_test_')
  test.addCleanup(shutil.rmtree, path, ignore_errors=True)
  if name:
    path = os.path.join(path, name)
    os.makedirs(path)
  return path


def config(dataset: str = 'mnist5k', **overrides):
  """Returns a base config reading `dataset` from the session data dir, tiny images."""
  c = base.get_base_config()
  c.dataset = dataset
  c.data_dir = data_dir()
  c.batch = 32
  c.batch_eval = 48
  c.pp.crop = 16
  c.pp.resize = 20
  c.shuffle_buffer = 1000
  c.prefetch = 1
  for key, value in overrides.items():
    target = c
    *parents, leaf = key.split('.')
    for p in parents:
      target = target[p]
    target[leaf] = value
  return c


def image_bytes(rng: np.random.Generator, fmt: str, size=(20, 24), mode='RGB') -> bytes:
  """Returns a random image encoded as 'JPEG' or 'PNG'."""
  channels = {'RGB': 3, 'L': 1}[mode]
  pixels = rng.integers(0, 256, size=size + (channels,), dtype=np.uint8)
  im = Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)
  buf = io.BytesIO()
  im.save(buf, format=fmt)
  return buf.getvalue()


def make_image_folder(root: str, counts: dict[str, dict[str, int]], seed: int = 0) -> dict:
  """Writes ROOT/<split>/<class>/*.{jpg,png} (alternating formats, some grayscale).

  counts: {split: {class: number of images}}. Returns {split: number of images written}.
  """
  rng = np.random.default_rng(seed)
  written = {}
  for split, classes in counts.items():
    written[split] = 0
    for cls, n in classes.items():
      folder = os.path.join(root, split, cls)
      os.makedirs(folder, exist_ok=True)
      for i in range(n):
        fmt, ext = (('JPEG', 'jpg'), ('PNG', 'png'))[i % 2]
        mode = 'L' if i % 3 == 2 else 'RGB'
        with open(os.path.join(folder, f'{i}.{ext}'), 'wb') as f:
          f.write(image_bytes(rng, fmt, mode=mode))
        written[split] += 1
  return written
