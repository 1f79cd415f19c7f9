r"""k-nearest-neighbour accuracy on frozen features (DINO's weighted k-NN evaluation).

Features (vit_jax.evaluators.features: the model without its head) of the whole
training split are the memory bank, the test split's are the queries, all L2
normalised. Each query takes its `k` most cosine-similar training examples; each
votes for its class with weight exp(similarity / temperature); the class with the
largest sum is the prediction (Caron et al. 2021, eval_knn: k = 20, T = 0.07).
Queries go through in chunks of `chunk`, so memory holds chunk x N similarities.

In training: `config.evals.knn = {'type': 'knn', 'every': N, 'datasets': ('mnist5k',),
'k': 20, 'temperature': 0.07}` logs `knn/<dataset>_top1` (the prefix is the
evaluator's name). On a checkpoint: `python -m vit_jax.fewshot --probes=knn`.
"""
from collections.abc import Mapping
import functools
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax.evaluators import features

DEFAULT_K = 20
DEFAULT_TEMPERATURE = 0.07
DEFAULT_CHUNK = 256


def normalize(x: np.ndarray) -> np.ndarray:
  """Rows scaled to unit L2 norm (zero rows stay zero)."""
  x = np.asarray(x, np.float32)
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


@functools.partial(jax.jit, static_argnames=('k', 'num_classes'))
def _vote(bank: jax.Array, bank_labels: jax.Array, queries: jax.Array, *, k: int,
          temperature: float, num_classes: int) -> jax.Array:
  """Summed exp(sim / T) votes [Q, C] of each query's k most similar bank rows."""
  sims = queries @ bank.T
  top, index = jax.lax.top_k(sims, k)
  weights = jnp.exp(top / temperature)
  votes = jax.nn.one_hot(bank_labels[index], num_classes, dtype=weights.dtype)
  return jnp.einsum('qk,qkc->qc', weights, votes)


def knn_votes(bank: np.ndarray, bank_labels: np.ndarray, queries: np.ndarray,
              num_classes: int, k: int = DEFAULT_K,
              temperature: float = DEFAULT_TEMPERATURE,
              chunk: int = DEFAULT_CHUNK) -> np.ndarray:
  """Class votes [Q, C] of L2-normalised `queries` [Q, D] against `bank` [N, D]."""
  bank = normalize(bank)
  queries = normalize(queries)
  bank_labels = np.asarray(bank_labels, np.int32)
  if bank.ndim != 2 or queries.ndim != 2 or bank.shape[1] != queries.shape[1]:
    raise ValueError(f'knn: need bank [N, D] and queries [Q, D], got {bank.shape} '
                     f'and {queries.shape}.')
  if len(bank) != len(bank_labels) or not len(bank):
    raise ValueError(f'knn: {len(bank)} bank rows but {len(bank_labels)} labels.')
  if temperature <= 0:
    raise ValueError(f'knn: temperature={temperature} must be > 0.')
  k = min(int(k), len(bank))
  bank_dev, labels_dev = jnp.asarray(bank), jnp.asarray(bank_labels)
  out = []
  for start in range(0, len(queries), chunk):
    block = queries[start:start + chunk]
    n = len(block)
    if n < chunk:  # one shape for every chunk: compiled once
      block = np.concatenate([block, np.zeros((chunk - n, block.shape[1]), block.dtype)])
    votes = _vote(bank_dev, labels_dev, jnp.asarray(block), k=k,
                  temperature=float(temperature), num_classes=int(num_classes))
    out.append(np.asarray(votes)[:n])
  if not out:
    return np.zeros((0, num_classes), np.float32)
  return np.concatenate(out)


def knn_accuracy(train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray],
                 num_classes: int, k: int = DEFAULT_K,
                 temperature: float = DEFAULT_TEMPERATURE,
                 chunk: int = DEFAULT_CHUNK) -> dict[str, float]:
  """{'top1': ..., 'top5': ...} of the weighted k-NN classifier (top5 with >= 5 classes)."""
  votes = knn_votes(train[0], train[1], test[0], num_classes, k, temperature, chunk)
  labels = np.asarray(test[1])
  # A stable descending order: ties go to the lower class index, as argmax does.
  ranked = np.argsort(-votes, axis=1, kind='stable')
  out = {'top1': float((ranked[:, 0] == labels).mean())}
  if num_classes >= 5:
    out['top5'] = float((ranked[:, :5] == labels[:, None]).any(axis=1).mean())
  return out


def check_options(name: str, options: ml_collections.ConfigDict,
                  config: ml_collections.ConfigDict) -> None:
  """One-line errors for the options of a k-NN evaluator (datasets, k, temperature)."""
  features.check_datasets(name, options.get('datasets', ()), config.get('data_dir'))
  k = options.get('k', DEFAULT_K)
  if not isinstance(k, int) or isinstance(k, bool) or k < 1:
    raise ValueError(f'config.evals.{name}.k={k!r}: use an integer >= 1 (DINO: 20).')
  temperature = options.get('temperature', DEFAULT_TEMPERATURE)
  if not isinstance(temperature, (int, float)) or temperature <= 0:
    raise ValueError(f'config.evals.{name}.temperature={temperature!r}: use a number '
                     '> 0 (DINO: 0.07).')
  chunk = options.get('chunk', DEFAULT_CHUNK)
  if not isinstance(chunk, int) or chunk < 1:
    raise ValueError(f'config.evals.{name}.chunk={chunk!r}: use an integer >= 1.')
  features.check_resolution(name, options)
  features.check_batch(config)


class KNN(features.FeatureProbe):
  """Weighted k-NN top-1 (and top-5) accuracy of the frozen features on each dataset."""

  OPTIONS = features.FeatureProbe.OPTIONS + ('k', 'temperature', 'chunk')

  @classmethod
  def check(cls, name: str, options: ml_collections.ConfigDict,
            config: ml_collections.ConfigDict) -> None:
    check_options(name, options, config)

  def run(self, params: Mapping[str, Any]) -> dict[str, float]:
    """`<name>/<dataset>_top1` (and `_top5`) for every dataset."""
    metrics = {}
    for entry in self.datasets:
      data, train, test = self.split_features(params, entry)
      result = knn_accuracy(train, test, data.num_classes,
                            self.options.get('k', DEFAULT_K),
                            self.options.get('temperature', DEFAULT_TEMPERATURE),
                            self.options.get('chunk', DEFAULT_CHUNK))
      logging.info('knn %s: %s', entry, result)
      for key, value in result.items():
        metrics[f'{self.name}/{features.dataset_key(entry)}_{key}'] = value
    return metrics
