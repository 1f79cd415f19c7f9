"""Training objectives chosen by name: what the trainable parameters are and what a batch costs.

`config.objective` names an entry of OBJECTIVES (or one added with `register`); its
options are `config.objectives.<name>`. An objective wraps the model: `init` makes the
trainable parameter tree, `loss` scores a batch, and `model_params` returns the part in
the model's published layout (what params.npz, evaluators and fine-tuning use). The
supervised objective trains the model's parameters alone, so there the two trees are one.
"""
import dataclasses
import inspect
from typing import Any, Callable, Optional, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

Params = Any


class Objective(Protocol):
  """The interface the train step and the loop use."""
  model: nn.Module

  def init(self, rng: jax.Array, image_shape: tuple[int, ...]) -> Params:
    """The trainable parameters, freshly initialised."""

  def loss(self, params: Params, batch: dict, rng: jax.Array) -> tuple[jax.Array, dict]:
    """(mean loss, extra metrics as scalars) of a training batch."""

  def model_params(self, params: Params) -> Params:
    """The model's parameters in the published layout."""

  def with_model_params(self, params: Params, model_params: Params) -> Params:
    """`params` with the model's part replaced (to start from a checkpoint)."""


def softmax_xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Per-example softmax cross-entropy against (soft) one-hot labels."""
  return optax.softmax_cross_entropy(logits, labels)


def sigmoid_xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Per-example sigmoid cross-entropy summed over classes (multi-label)."""
  return jnp.sum(optax.sigmoid_binary_cross_entropy(logits, labels), axis=-1)


LOSSES = {'softmax_xent': softmax_xent, 'sigmoid_xent': sigmoid_xent}


@dataclasses.dataclass(frozen=True)
class Supervised:
  """Classification with labels: the model's logits against the batch's targets."""
  model: nn.Module
  loss_name: str = 'softmax_xent'

  def __post_init__(self):
    if self.loss_name not in LOSSES:
      raise ValueError(f'config.objectives.supervised.loss={self.loss_name!r} is unknown; '
                       f'use one of {", ".join(LOSSES)}.')

  @property
  def example_loss(self) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """Per-example loss of logits against labels (what evaluation reports)."""
    return LOSSES[self.loss_name]

  def init(self, rng: jax.Array, image_shape: tuple[int, ...]) -> Params:
    return self.model.init(rng, jnp.zeros(image_shape, jnp.float32))['params']

  def loss(self, params: Params, batch: dict, rng: jax.Array) -> tuple[jax.Array, dict]:
    logits = self.model.apply({'params': params}, batch['image'], train=True,
                              rngs={'dropout': rng})
    return jnp.mean(self.example_loss(logits, batch['label'])), {}

  def model_params(self, params: Params) -> Params:
    return params

  def with_model_params(self, params: Params, model_params: Params) -> Params:
    del params
    return model_params


def _supervised(model: nn.Module, *, loss: str = 'softmax_xent') -> Supervised:
  return Supervised(model, loss)


# name -> factory(model, **config.objectives.<name>) -> Objective
OBJECTIVES: dict[str, Callable[..., Objective]] = {'supervised': _supervised}


def register(name: str, factory: Callable[..., Objective]) -> None:
  """Makes `factory(model, **options)` selectable as config.objective=name."""
  OBJECTIVES[name] = factory


def _options(config: ml_collections.ConfigDict) -> dict[str, Any]:
  section = config.get('objectives', {}).get(config.objective, {})
  return dict(section.to_dict() if hasattr(section, 'to_dict') else section)


def check(config: ml_collections.ConfigDict) -> None:
  """One-line errors for an unknown objective or options it does not take."""
  if config.objective not in OBJECTIVES:
    raise ValueError(f'config.objective={config.objective!r} is unknown; use one of '
                     f'{", ".join(OBJECTIVES)}.')
  params = inspect.signature(OBJECTIVES[config.objective]).parameters
  if any(p.kind == p.VAR_KEYWORD for p in params.values()):
    return
  for key in _options(config):
    if key not in params or key == 'model':
      valid = sorted(set(params) - {'model'})
      raise ValueError(f'config.objectives.{config.objective}.{key} is not an option of '
                       f'objective {config.objective!r}; its options: {", ".join(valid)}.')


def make(config: ml_collections.ConfigDict, model: nn.Module) -> Objective:
  """The objective config.objective names, around `model`."""
  check(config)
  return OBJECTIVES[config.objective](model, **_options(config))


def example_loss(objective: Objective) -> Optional[Callable[[jax.Array, jax.Array], jax.Array]]:
  """The objective's per-example classification loss, if it has one."""
  return getattr(objective, 'example_loss', None)
