"""The Park et al. (ICLR 2023) analyses of one checkpoint on one dataset, as numbers.

`analyze` runs a loaded model on the first `images` test images (attention distance,
query-key NMI, Fourier log-amplitude of every layer's patch tokens: see
vit_jax.inference.analyses) and probes every layer's pooled features over the whole
training split with k-NN and the linear probe (vit_jax.evaluators.knn, .linear_probe).
"""
import dataclasses
from typing import Any, Sequence

import jax
import ml_collections
import numpy as np

from vit_jax.evaluators import features
from vit_jax.evaluators import knn
from vit_jax.evaluators import linear_probe
from vit_jax.inference import analyses
from vit_jax.inference import figures
from vit_jax.inference import load

PROBES = ('knn', 'linear')


@dataclasses.dataclass(frozen=True)
class Options:
  """What the analyses read and how the layers are probed."""
  images: int = 64                  # test images for the attention and Fourier analyses
  pooling: str = 'auto'             # features.POOLINGS: class token or mean patch token
  probes: Sequence[str] = PROBES    # per-layer probes to run
  k: int = knn.DEFAULT_K
  temperature: float = knn.DEFAULT_TEMPERATURE
  weight_decays: Sequence[float] = linear_probe.DEFAULT_WEIGHT_DECAYS
  steps: int = linear_probe.DEFAULT_STEPS
  batch_size: int = 64


def check_model(loaded: load.LoadedModel, what: str) -> None:
  """One-line error for a model the analyses cannot read (no attention, no patch grid)."""
  if not figures.has_attention(loaded.model):
    raise ValueError(f'{what}: {loaded.name} has no attention (an MLP-Mixer?); the '
                     'analyses need a ViT.')
  figures.patch_grid(loaded.model, loaded.params)  # one line if the grid is not square


def _first_images(data: features.Dataset, pp: ml_collections.ConfigDict,
                  count: int, batch_size: int) -> np.ndarray:
  images = []
  for batch, _ in features.image_batches(data, data.test_split, None, pp, batch_size):
    images.append(batch)
    if sum(len(b) for b in images) >= count:
      break
  if not images:
    raise ValueError(f'{data.name} split {data.test_split!r} has no examples.')
  return np.concatenate(images)[:count]


def analyze(loaded: load.LoadedModel, data: features.Dataset,
            pp: ml_collections.ConfigDict, mesh: jax.sharding.Mesh,
            options: Options) -> dict[str, Any]:
  """Every analysis of the model on the dataset: plain lists and numbers (JSON-ready)."""
  model, params = loaded.model, loaded.params
  prefix = features.prefix_tokens(model)
  grid = figures.patch_grid(model, params)
  extractor = features.FeatureExtractor(model, mesh, options.batch_size)
  images = _first_images(data, pp, options.images, options.batch_size)
  # Attention of a batch at a time: [layers, N, heads, T, T] grows with N x T^2.
  weights = np.concatenate([
      figures.attention_weights(model, params, images[i:i + options.batch_size])
      for i in range(0, len(images), options.batch_size)], axis=1)
  tokens = extractor.layer_tokens(params, images)
  curves = analyses.fourier_log_amplitude(tokens, prefix, grid)
  out = {
      'images': int(len(images)),
      'layers': int(weights.shape[0]),
      'heads': int(weights.shape[2]),
      'prefix_tokens': prefix,
      'patch_grid': list(grid),
      'attention_distance': analyses.mean_attention_distance(
          weights, prefix, grid, load.model_stride(model)).tolist(),
      'nmi': analyses.attention_nmi(weights, prefix).tolist(),
      'fourier_frequencies': analyses.frequencies(grid[0]).tolist(),
      'fourier_log_amplitude': curves.tolist(),
      'fourier_high_frequency': curves[:, -1].tolist(),
  }
  if options.probes:
    train_x, train_y = extractor.layer_features(params, features.image_batches(
        data, data.train_split, None, pp, options.batch_size), options.pooling)
    test_x, test_y = extractor.layer_features(params, features.image_batches(
        data, data.test_split, None, pp, options.batch_size), options.pooling)
    if 'knn' in options.probes:
      out['knn_top1'] = [
          knn.knn_accuracy((tr, train_y), (te, test_y), data.num_classes, options.k,
                           options.temperature)['top1']
          for tr, te in zip(train_x, test_x)]
    if 'linear' in options.probes:
      out['linear_top1'] = [
          linear_probe.linear_probe_accuracy(
              (tr, train_y), (te, test_y), data.num_classes, options.weight_decays,
              options.steps)[0]
          for tr, te in zip(train_x, test_x)]
  return out
