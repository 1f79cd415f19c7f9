"""Class probabilities of a loaded model on images: the top-k of each."""
from typing import Optional, Sequence

import jax
import numpy as np

from vit_jax.inference import engine as engine_lib
from vit_jax.inference import images as images_lib
from vit_jax.inference import load

ACTIVATIONS = {'softmax': jax.nn.softmax, 'sigmoid': jax.nn.sigmoid}


def make_predict_fn(loaded: load.LoadedModel, activation: str = 'softmax', batch: int = 0,
                    n_images: Optional[int] = None, weights: str = 'default'):
  """Returns images [N, H, W, 3] in [-1, 1] -> class probabilities [N, C] (numpy).

  Runs the inference engine (vit_jax/inference/engine.py): the compute dtype of the
  backend, `batch` images per call (0: from device memory, at most what `n_images` need),
  the last batch padded; `weights='fp8'` quantizes the blocks' kernels once to float8.
  """
  if activation not in ACTIVATIONS:
    raise ValueError(f'Unknown activation {activation!r}; use softmax or sigmoid.')
  if not loaded.num_classes:
    raise ValueError(f'Checkpoint for {loaded.name!r} has no classification head; it '
                     'cannot predict classes.')
  engine = engine_lib.build(loaded.model, loaded.params, loaded.resolution, dtype='auto',
                            weights=weights, batch=batch, n_images=n_images,
                            transform=ACTIVATIONS[activation])
  return engine.run


def top_k(probs: np.ndarray, names: Sequence[str],
          k: int = 5) -> list[list[tuple[str, float]]]:
  """The k most probable (name, probability) pairs of each row of `probs`."""
  order = np.argsort(-probs, axis=-1, kind='stable')[:, :k]
  return [[(names[i], float(row[i])) for i in idx]
          for row, idx in zip(probs, order)]


def predict_files(loaded: load.LoadedModel, paths: Sequence[str],
                  names: Sequence[str], activation: str = 'softmax',
                  k: int = 5, batch_size: int = 0) -> list[list[tuple[str, float]]]:
  """Top-k (name, probability) for each image file, in the order of `paths`."""
  if len(names) != loaded.num_classes:
    raise ValueError(f'The label set has {len(names)} names but the checkpoint has '
                     f'{loaded.num_classes} outputs; pass a matching --labels.')
  images = np.stack([images_lib.load_image(p, loaded.resolution) for p in paths])
  probs = make_predict_fn(loaded, activation, batch_size, len(images))(images)
  return top_k(probs, names, k)
