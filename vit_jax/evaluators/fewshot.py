r"""Few-shot linear evaluation on frozen pre-logits features (the ViT paper's probe).

For each dataset, seed and k in `shots`: k training images per class are drawn,
their features (the model's output without its head: the pre-logits layer when
it has one, else the pooled, normalised token) are whitened, and a ridge
regression onto {-1, 1}^C targets is solved in closed form; test accuracy is the
argmax of its outputs. Metrics are the mean over seeds, `fewshot/<dataset>_<k>shot`.

Regularisation: every strength in `l2_regs` is solved at once (one
eigendecomposition) and the one with the best accuracy on `val_per_class`
further training images per class, disjoint from the shots, is scored on test.
Nothing is chosen on the test split.

In training: `config.evals.fewshot = {'every': N, 'datasets': ('mnist5k',), 'shots': (1, 5,
10, 25), 'seeds': 3, 'resolution': 0}` logs `fewshot/<dataset>_<k>shot` (the prefix is the
evaluator's name). On a checkpoint: `python -m vit_jax.fewshot` (vit_jax.cli.fewshot).
"""
from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any

from absl import logging
import ml_collections
import numpy as np

from vit_jax.evaluators import base
from vit_jax.evaluators import features

# Strengths relative to the whitened features (each has unit variance).
DEFAULT_L2_REGS = tuple(2.0**e for e in range(-4, 17, 2))
DEFAULT_VAL_PER_CLASS = 10


# ----------------------------------------------------------------------------
# Closed-form ridge regression (pure numpy, float64 on the host).


# fit_ridge's `features` argument hides the module inside it.
_check_labelled = features.check_labelled


@dataclasses.dataclass(frozen=True)
class RidgeProbe:
  """Linear classifiers for several l2 strengths fitted on one few-shot set."""
  mean: np.ndarray       # [D] feature mean of the training set
  scale: np.ndarray      # [D] feature std of the training set
  weights: np.ndarray    # [L, D, C], one slice per l2 strength
  bias: np.ndarray       # [C]
  l2_regs: tuple[float, ...]

  def scores(self, features: np.ndarray) -> np.ndarray:
    """Class scores [L, N, C] of every l2 strength for `features` [N, D]."""
    x = (np.asarray(features, np.float64) - self.mean) / self.scale
    return np.einsum('nd,ldc->lnc', x, self.weights) + self.bias

  def predict(self, features: np.ndarray) -> np.ndarray:
    """Predicted labels [L, N] of every l2 strength."""
    return np.argmax(self.scores(features), axis=-1)


def fit_ridge(features: np.ndarray, labels: np.ndarray, num_classes: int,
              l2_regs: Sequence[float]) -> RidgeProbe:
  """Least squares from whitened `features` [N, D] to {-1, 1} one-hot targets, per l2."""
  x = np.asarray(features, np.float64)
  labels = np.asarray(labels)
  _check_labelled(x, labels, num_classes, 'fit_ridge')
  l2 = np.asarray(l2_regs, np.float64)
  if l2.ndim != 1 or not len(l2) or (l2 <= 0).any():
    raise ValueError(f'l2_regs must be a non-empty list of positive numbers, got '
                     f'{list(l2_regs)}.')
  mean = x.mean(axis=0)
  # The epsilon keeps constant features (dead units, 1-shot) from dividing by 0.
  scale = x.std(axis=0) + 1e-6
  x = (x - mean) / scale
  y = 2.0 * np.eye(num_classes)[labels] - 1.0
  y_mean = y.mean(axis=0)
  # Centred data make the unregularised bias exactly the target mean.
  y = y - y_mean
  n, d = x.shape
  # (x^T x + l2 I)^-1 x^T y == x^T (x x^T + l2 I)^-1 y: decompose the smaller Gram
  # matrix once, then every l2 costs only a rescaling of its eigenvalues.
  if n >= d:
    eigs, q = np.linalg.eigh(x.T @ x)
    lhs, rhs = q, q.T @ (x.T @ y)
  else:
    eigs, q = np.linalg.eigh(x @ x.T)
    lhs, rhs = x.T @ q, q.T @ y
  eigs = np.maximum(eigs, 0.0)
  weights = np.stack([(lhs / (eigs + reg)) @ rhs for reg in l2])
  return RidgeProbe(mean, scale, weights, y_mean, tuple(float(v) for v in l2))


def fewshot_accuracy(train: tuple[np.ndarray, np.ndarray],
                     val: tuple[np.ndarray, np.ndarray],
                     test: tuple[np.ndarray, np.ndarray], num_classes: int,
                     l2_regs: Sequence[float]) -> tuple[float, float]:
  """(test accuracy, chosen l2) of the probe whose l2 is best on `val` (features, labels)."""
  probe = fit_ridge(train[0], train[1], num_classes, l2_regs)
  if len(val[1]):
    val_acc = (probe.predict(val[0]) == val[1]).mean(axis=1)
    # Ties go to the strongest regularisation, the safer choice with few shots.
    best = len(l2_regs) - 1 - int(np.argmax(val_acc[::-1]))
  else:
    best = len(l2_regs) // 2
  test_pred = probe.predict(test[0])[best]
  return float((test_pred == test[1]).mean()), probe.l2_regs[best]


def sample_shots(labels: np.ndarray, num_classes: int, max_shots: int,
                 val_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Per class, a random order's first `max_shots` rows [C, max_shots] and next val rows.

  Shot rows are -1 where a class has too few examples; k-shot uses [:, :k].
  """
  rng = np.random.default_rng(seed)
  shots = np.full((num_classes, max_shots), -1, np.int64)
  val = []
  for c in range(num_classes):
    rows = rng.permutation(np.flatnonzero(labels == c))
    shots[c, :min(max_shots, len(rows))] = rows[:max_shots]
    val.append(rows[max_shots:max_shots + val_per_class])
  return shots, np.concatenate(val).astype(np.int64)


# ----------------------------------------------------------------------------
# The evaluator.


def metric_name(prefix: str, dataset: str, shots: int) -> str:
  """'<prefix>/<dataset>_<k>shot' with TFDS config slashes flattened."""
  return f'{prefix}/{features.dataset_key(dataset)}_{shots}shot'


class FewShot(base.Evaluator):
  """Few-shot linear probes of the model's pre-logits features on several datasets."""

  OPTIONS = ('datasets', 'shots', 'seeds', 'resolution', 'l2_regs', 'val_per_class')

  @classmethod
  def check(cls, name: str, options: ml_collections.ConfigDict,
            config: ml_collections.ConfigDict) -> None:
    features.check_datasets(name, options.get('datasets', ()), config.get('data_dir'))
    shots = list(options.get('shots', ()))
    if not shots or not all(isinstance(k, int) and k > 0 for k in shots):
      raise ValueError(f'config.evals.{name}.shots={options.get("shots")!r}: use '
                       'positive integers, e.g. (1, 5, 10, 25).')
    seeds = options.get('seeds', 3)
    if not isinstance(seeds, int) or seeds < 1:
      raise ValueError(f'config.evals.{name}.seeds={seeds!r}: use an integer >= 1.')
    features.check_resolution(name, options)
    features.check_batch(config)

  def __init__(self, name: str, options: ml_collections.ConfigDict,
               context: base.Context):
    super().__init__(name, options, context)
    config, mesh = context.config, context.mesh
    self.check(name, options, config)
    self.datasets = list(options.datasets)
    self.shots = sorted(set(options.shots))
    self.seeds = options.get('seeds', 3)
    self.pp = features.eval_pp(config, options.get('resolution', 0))
    self.l2_regs = tuple(options.get('l2_regs', DEFAULT_L2_REGS))
    self.val_per_class = int(options.get('val_per_class', DEFAULT_VAL_PER_CLASS))
    self.data_dir = config.get('data_dir')
    self.manual_dir = config.get('manual_dir')
    self.batch_size = features.check_batch(config, mesh)
    self.extractor = features.FeatureExtractor(context.model, mesh, self.batch_size)
    self._data: dict[str, tuple[features.Dataset, list]] = {}

  def _prepare(self, spec: str) -> tuple[features.Dataset, list]:
    """Opens a dataset and draws every seed's shots and validation rows, once."""
    if spec not in self._data:
      dataset = features.open_dataset(spec, self.data_dir, self.manual_dir)
      draws = [sample_shots(dataset.train_labels, dataset.num_classes,
                            max(self.shots), self.val_per_class, seed)
               for seed in range(self.seeds)]
      self._data[spec] = (dataset, draws)
    return self._data[spec]

  def run(self, params: Mapping[str, Any]) -> dict[str, float]:
    """Mean test accuracy over seeds of every dataset and shot count."""
    metrics = {}
    for spec in self.datasets:
      dataset, draws = self._prepare(spec)
      rows = np.unique(np.concatenate(
          [np.concatenate([s.ravel(), v]) for s, v in draws]))
      rows = rows[rows >= 0]
      train_x, train_y = self.extractor.features(params, features.image_batches(
          dataset, dataset.train_split, rows, self.pp, self.batch_size))
      if not np.array_equal(train_y, dataset.train_labels[rows]):
        raise RuntimeError(f'Few-shot dataset {dataset.name!r}: split '
                           f'{dataset.train_split!r} changed while reading it.')
      position = {int(r): i for i, r in enumerate(rows)}
      test = self.extractor.features(params, features.image_batches(
          dataset, dataset.test_split, None, self.pp, self.batch_size))
      for k in self.shots:
        accs = []
        for seed, (shot_rows, val_rows) in enumerate(draws):
          chosen = shot_rows[:, :k].ravel()
          idx = np.array([position[int(r)] for r in chosen if r >= 0])
          val_idx = np.array([position[int(r)] for r in val_rows], np.int64)
          acc, l2 = fewshot_accuracy(
              (train_x[idx], train_y[idx]), (train_x[val_idx], train_y[val_idx]),
              test, dataset.num_classes, self.l2_regs)
          logging.info('fewshot %s %d-shot seed %d: accuracy %.4f (l2 %g)',
                       spec, k, seed, acc, l2)
          accs.append(acc)
        metrics[metric_name(self.name, spec, k)] = float(np.mean(accs))
    return metrics
