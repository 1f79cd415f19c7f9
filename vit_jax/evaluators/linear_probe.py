r"""Linear probe on frozen features over the whole training split (softmax regression).

The features (vit_jax.evaluators.features) of the training split are standardised
with their own mean and spread, and a softmax (multinomial logistic) regression is fit
by full-batch L-BFGS for `steps` iterations, its loss the mean cross-entropy plus
weight_decay / 2 * |W|^2 (the bias is not decayed). Each strength in
`weight_decays` is fit on the training split less a held-out `val_fraction`
(drawn with `seed`); the one with the best held-out accuracy is refit on the whole
training split and scored on the test split. Nothing is chosen on the test split.

This is `protocol='lbfgs'` (the default, for small sets: every feature in memory, no
augmentation). `protocol='dino'` or `'mae'` runs the papers' streaming linear
evaluation instead (vit_jax.evaluators.linear_protocols), with its own options.

In training: `config.evals.linear = {'type': 'linear_probe', 'every': N, 'datasets':
('mnist5k',)}` logs `linear/<dataset>_top1` (the prefix is the evaluator's name).
On a checkpoint: `python -m vit_jax.fewshot --probes=linear_probe
[--linear_protocol=dino]`.
"""
from collections.abc import Mapping, Sequence
import dataclasses
import functools
from typing import Any, Optional

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vit_jax import option_rules
from vit_jax.evaluators import base
from vit_jax.evaluators import features
from vit_jax.evaluators import linear_protocols

DEFAULT_WEIGHT_DECAYS = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
DEFAULT_STEPS = 200
DEFAULT_VAL_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class LinearClassifier:
  """A softmax regression on standardised features."""
  mean: np.ndarray     # [D]
  scale: np.ndarray    # [D]
  kernel: np.ndarray   # [D, C]
  bias: np.ndarray     # [C]

  def predict(self, x: np.ndarray) -> np.ndarray:
    """Predicted classes [N] of features [N, D]."""
    z = (np.asarray(x, np.float32) - self.mean) / self.scale
    return np.argmax(z @ self.kernel + self.bias, axis=-1)


@functools.partial(jax.jit, static_argnames=('num_classes', 'steps'))
def _fit(x: jax.Array, labels: jax.Array, mask: jax.Array, weight_decay: jax.Array, *,
         num_classes: int, steps: int) -> tuple[jax.Array, jax.Array]:
  """(kernel [D, C], bias [C]) minimising mean cross-entropy + wd / 2 |kernel|^2.

  The mean runs over the rows where `mask` is 1, so held-out splits keep one shape
  (one compilation for every fit).
  """
  targets = jax.nn.one_hot(labels, num_classes)

  def loss(params):
    logits = x @ params['kernel'] + params['bias']
    xent = optax.softmax_cross_entropy(logits, targets)
    xent = jnp.sum(xent * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return xent + 0.5 * weight_decay * jnp.sum(params['kernel'] ** 2)

  params = {'kernel': jnp.zeros((x.shape[1], num_classes), x.dtype),
            'bias': jnp.zeros((num_classes,), x.dtype)}
  solver = optax.lbfgs()
  value_and_grad = optax.value_and_grad_from_state(loss)

  def step(carry, _):
    params, state = carry
    value, grad = value_and_grad(params, state=state)
    updates, state = solver.update(grad, state, params, value=value, grad=grad,
                                   value_fn=loss)
    return (optax.apply_updates(params, updates), state), None

  (params, _), _ = jax.lax.scan(step, (params, solver.init(params)), None,
                                length=steps)
  return params['kernel'], params['bias']


def fit_linear(x: np.ndarray, labels: np.ndarray, num_classes: int,
               weight_decay: float, steps: int = DEFAULT_STEPS,
               mask: Optional[np.ndarray] = None) -> LinearClassifier:
  """The softmax regression of standardised `x` [N, D] onto `labels` [N].

  With `mask` [N] (0/1), only those rows are fit; the standardisation uses all rows
  (it reads no labels).
  """
  x = np.asarray(x, np.float32)
  labels = np.asarray(labels)
  features.check_labelled(x, labels, num_classes, 'linear probe')
  mask = np.ones(len(x), np.float32) if mask is None else np.asarray(mask, np.float32)
  mean = x.mean(axis=0)
  # The epsilon keeps constant features (dead units) from dividing by 0.
  scale = x.std(axis=0) + 1e-6
  kernel, bias = _fit(jnp.asarray((x - mean) / scale), jnp.asarray(labels, jnp.int32),
                      jnp.asarray(mask), jnp.float32(weight_decay),
                      num_classes=int(num_classes), steps=int(steps))
  return LinearClassifier(mean, scale, np.asarray(kernel), np.asarray(bias))


def linear_probe_accuracy(train: tuple[np.ndarray, np.ndarray],
                          test: tuple[np.ndarray, np.ndarray], num_classes: int,
                          weight_decays: Sequence[float] = DEFAULT_WEIGHT_DECAYS,
                          steps: int = DEFAULT_STEPS,
                          val_fraction: float = DEFAULT_VAL_FRACTION,
                          seed: int = 0) -> tuple[float, float]:
  """(test accuracy, chosen weight decay): chosen on a held-out part of `train`."""
  x, y = np.asarray(train[0], np.float32), np.asarray(train[1])
  features.check_labelled(x, y, num_classes, 'linear probe')
  decays = [float(w) for w in weight_decays]
  if not decays or any(w < 0 for w in decays):
    raise ValueError(f'weight_decays must be a non-empty list of numbers >= 0, got '
                     f'{list(weight_decays)}.')
  best = decays[0]
  held = int(round(len(x) * val_fraction))
  if len(decays) > 1 and 0 < held < len(x):
    val = np.random.default_rng(seed).permutation(len(x))[:held]
    mask = np.ones(len(x), np.float32)
    mask[val] = 0.0
    accs = [(fit_linear(x, y, num_classes, wd, steps, mask).predict(x[val])
             == y[val]).mean() for wd in decays]
    # Ties go to the strongest regularisation, the safer choice.
    best = decays[len(decays) - 1 - int(np.argmax(accs[::-1]))]
    logging.info('linear probe: held-out accuracy %s per weight decay %s',
                 [round(float(a), 4) for a in accs], decays)
  classifier = fit_linear(x, y, num_classes, best, steps)
  return float((classifier.predict(test[0]) == np.asarray(test[1])).mean()), best


class LinearProbe(features.FeatureProbe):
  """Top-1 accuracy of a linear classifier on the frozen features of each dataset."""

  _LBFGS = ('weight_decays', 'steps', 'val_fraction')
  _STREAMING = tuple(sorted({k for p in linear_protocols.PROTOCOLS.values() for k in p}))
  OPTIONS = (features.FeatureProbe.OPTIONS + ('protocol', 'seed') + _LBFGS + _STREAMING)
  OPTION_RULES = (
      option_rules.Rule(('protocol',), lambda p: linear_protocols.protocol_of(
          {'protocol': p}) == 'lbfgs', _STREAMING, "set protocol to 'dino' or 'mae'"),
      option_rules.Rule(('protocol',), lambda p: linear_protocols.protocol_of(
          {'protocol': p}) != 'lbfgs', _LBFGS, "set protocol to 'lbfgs'"),
  )

  def __init__(self, name: str, options: ml_collections.ConfigDict,
               context: base.Context):
    super().__init__(name, options, context)
    self.streaming = None
    if linear_protocols.protocol_of(options) != 'lbfgs':
      self.streaming = linear_protocols.StreamingLinear(
          name, linear_protocols.resolve(name, options), context, self.extractor, self.pp)

  @classmethod
  def check(cls, name: str, options: ml_collections.ConfigDict,
            config: ml_collections.ConfigDict) -> None:
    features.check_datasets(name, options.get('datasets', ()), config.get('data_dir'))
    features.check_resolution(name, options)
    features.check_batch(config)
    if linear_protocols.protocol_of(options) != 'lbfgs':
      linear_protocols.resolve(name, options)  # the streaming protocol's options
      return
    decays = options.get('weight_decays', DEFAULT_WEIGHT_DECAYS)
    if (isinstance(decays, str) or not decays or
        not all(isinstance(w, (int, float)) and w >= 0 for w in decays)):
      raise ValueError(f'config.evals.{name}.weight_decays={decays!r}: use a list of '
                       'numbers >= 0, e.g. (1e-4, 1e-3, 1e-2).')
    steps = options.get('steps', DEFAULT_STEPS)
    if not isinstance(steps, int) or steps < 1:
      raise ValueError(f'config.evals.{name}.steps={steps!r}: use an integer >= 1.')
    fraction = options.get('val_fraction', DEFAULT_VAL_FRACTION)
    if not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
      raise ValueError(f'config.evals.{name}.val_fraction={fraction!r}: use a number '
                       'in [0, 1).')

  def run(self, params: Mapping[str, Any]) -> dict[str, float]:
    """`<name>/<dataset>_top1` for every dataset."""
    metrics = {}
    for entry in self.datasets:
      if self.streaming is not None:
        metrics.update(self.streaming.run(params, self.dataset(entry), entry))
        continue
      data, train, test = self.split_features(params, entry)
      acc, wd = linear_probe_accuracy(
          train, test, data.num_classes,
          self.options.get('weight_decays', DEFAULT_WEIGHT_DECAYS),
          self.options.get('steps', DEFAULT_STEPS),
          self.options.get('val_fraction', DEFAULT_VAL_FRACTION),
          self.options.get('seed', 0))
      logging.info('linear probe %s: accuracy %.4f (weight decay %g)', entry, acc, wd)
      metrics[f'{self.name}/{features.dataset_key(entry)}_top1'] = acc
    return metrics
