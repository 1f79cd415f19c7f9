"""Class probabilities of a loaded model on images: the top-k of each."""
from typing import Sequence

import jax
import numpy as np

from vit_jax.inference import images as images_lib
from vit_jax.inference import load

ACTIVATIONS = {'softmax': jax.nn.softmax, 'sigmoid': jax.nn.sigmoid}


def make_predict_fn(loaded: load.LoadedModel, activation: str = 'softmax'):
  """Returns a jitted images [N, H, W, 3] in [-1, 1] -> class probabilities [N, C]."""
  if activation not in ACTIVATIONS:
    raise ValueError(f'Unknown activation {activation!r}; use softmax or sigmoid.')
  if not loaded.num_classes:
    raise ValueError(f'Checkpoint for {loaded.name!r} has no classification head; it '
                     'cannot predict classes.')
  act = ACTIVATIONS[activation]

  @jax.jit
  def predict_fn(params, images):
    return act(loaded.model.apply({'params': params}, images, train=False))

  return lambda images: np.asarray(predict_fn(loaded.params, images))


def top_k(probs: np.ndarray, names: Sequence[str],
          k: int = 5) -> list[list[tuple[str, float]]]:
  """The k most probable (name, probability) pairs of each row of `probs`."""
  order = np.argsort(-probs, axis=-1, kind='stable')[:, :k]
  return [[(names[i], float(row[i])) for i in idx]
          for row, idx in zip(probs, order)]


def predict_files(loaded: load.LoadedModel, paths: Sequence[str],
                  names: Sequence[str], activation: str = 'softmax',
                  k: int = 5, batch_size: int = 16) -> list[list[tuple[str, float]]]:
  """Top-k (name, probability) for each image file, in the order of `paths`."""
  if len(names) != loaded.num_classes:
    raise ValueError(f'The label set has {len(names)} names but the checkpoint has '
                     f'{loaded.num_classes} outputs; pass a matching --labels.')
  images = [images_lib.load_image(p, loaded.resolution) for p in paths]
  predict_fn = make_predict_fn(loaded, activation)
  results = []
  for start in range(0, len(images), batch_size):
    probs = predict_fn(np.stack(images[start:start + batch_size]))
    results.extend(top_k(probs, names, k))
  return results
