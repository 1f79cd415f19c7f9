"""Training objectives chosen by name: what the trainable parameters are and what a batch costs.

`config.objective` names an entry of OBJECTIVES (or one added with `register`); its
options are `config.objectives.<name>`. An objective wraps the model: `init` makes the
trainable parameter tree, `loss` scores a batch, and `model_params` returns the part in
the model's published layout (what params.npz, evaluators and fine-tuning use). The
supervised objective trains the model's parameters alone, so there the two trees are one.
The self-supervised ones (`masked_patch`, `mae`) read no labels; they also train parts
that are not the ViT (`auxiliary_params`: a mask embedding and head, MAE's decoder), which
the trainer writes beside params.npz.

A stateful objective (`dino`) also owns state that gradients do not train (a teacher, a
running centre): `init_state(params)` makes it, `stateful_loss(params, state, batch, rng,
step)` returns (loss, (metrics, stats)) and `update_state(state, new params, stats, step)`
runs after the optimizer update in the same jitted step (vit_jax.train.step). It lives in
the train state's extra[STATE_KEY], sharded, checkpointed and resumed with the rest.
Its result (`result_params`) may be that state rather than the trained parameters.
"""
import dataclasses
import inspect
from typing import Any, Callable, Optional, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from vit_jax.data import view_counts
from vit_jax.models import flops
from vit_jax.models import mae
from vit_jax.models import masked_patch
from vit_jax.train import around_model
from vit_jax.train import dino

Params = Any
STATE_KEY = 'objective'  # a stateful objective's entry of TrainState.extra


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


def masked_mean(values: jax.Array, weights: jax.Array) -> jax.Array:
  """Mean of `values` over the entries whose weight is 1 (the masked patches)."""
  return jnp.sum(values * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def reconstruction_loss(pred: jax.Array, target: jax.Array,
                        masked: jax.Array) -> jax.Array:
  """Mean squared error per patch [n, tokens, P], averaged over the masked patches only."""
  return masked_mean(jnp.mean(jnp.square(pred - target), axis=-1), masked)


def patch_prediction_loss(out: jax.Array, target: jax.Array, chosen: jax.Array,
                          classes: int) -> tuple[jax.Array, dict]:
  """(loss, metrics) over the chosen patches: cross-entropy on class targets
  [n, tokens(, cells)] with its accuracy, or squared error on pixel targets."""
  if not jnp.issubdtype(target.dtype, jnp.integer):
    return reconstruction_loss(out, target, chosen), {}
  logits = out.reshape(target.shape + (classes,))  # 'downsized': cells per patch
  weights = jnp.broadcast_to(chosen.reshape(chosen.shape + (1,) * (target.ndim - 2)),
                             target.shape)
  xent = optax.softmax_cross_entropy_with_integer_labels(logits, target)
  hits = (jnp.argmax(logits, axis=-1) == target).astype(jnp.float32)
  return masked_mean(xent, weights), {'masked_patch_accuracy': masked_mean(hits, weights)}


@dataclasses.dataclass(frozen=True)
class MaskedPatch(around_model.AroundModel):
  """The ViT paper's self-supervision: predict corrupted patches' targets; no labels."""
  OWN = 'masked_patch'  # the [mask] embedding and the prediction head
  net: masked_patch.MaskedPatchPredictor

  def loss(self, params: Params, batch: dict, rng: jax.Array) -> tuple[jax.Array, dict]:
    images = batch['image']
    out, corruption = self.net.predict(params, images, rng, train=True)
    return patch_prediction_loss(out.astype(jnp.float32), self.net.targets(images),
                                 corruption.chosen, self.net.classes)


@dataclasses.dataclass(frozen=True)
class Mae(around_model.AroundModel):
  """Masked autoencoding: reconstruct the left-out patches' pixels; no labels."""
  OWN = 'decoder'  # with its mask token: what reconstructions need beside the ViT
  net: mae.MaskedAutoencoder
  norm_pix_loss: bool = True

  def loss(self, params: Params, batch: dict, rng: jax.Array) -> tuple[jax.Array, dict]:
    images = batch['image']
    pred, mask = self.net.predict(params, images, rng, train=True)
    target = mae.pixel_targets(images, self.net.patch, self.norm_pix_loss)
    return reconstruction_loss(pred, target, mask.masked), {}

  def flops_per_image(self, resolution: int) -> float:
    """Forward matmul FLOPs of the encoder (kept tokens) and the decoder (all tokens)."""
    return self.net.flops_per_image(resolution)


def _masked_patch(model: nn.Module, *, mask_ratio: float = 0.5,
                  replace_mask: float = 0.8, replace_random: float = 0.1,
                  target: str = 'mean_color', bits: int = 3,
                  downsized: int = 4) -> MaskedPatch:
  return MaskedPatch(masked_patch.MaskedPatchPredictor(
      model, mask_ratio, replace_mask, replace_random, target, bits, downsized))


def _mae(model: nn.Module, *, mask_ratio: float = 0.75, decoder_width: int = 512,
         decoder_depth: int = 8, decoder_heads: int = 16, decoder_mlp_dim: int = 2048,
         posemb: str = 'sincos2d', norm_pix_loss: bool = True) -> Mae:
  return Mae(mae.MaskedAutoencoder(model, mask_ratio, decoder_width, decoder_depth,
                                   decoder_heads, decoder_mlp_dim, posemb),
             norm_pix_loss)


# name -> factory(model, **config.objectives.<name>) -> Objective
# Factories taking a `total_steps` argument get config.total_steps (schedules over the run).
OBJECTIVES: dict[str, Callable[..., Objective]] = {
    'supervised': _supervised, 'masked_patch': _masked_patch, 'mae': _mae,
    'dino': dino.make}
_FROM_CONFIG = ('model', 'total_steps')


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
  ratio = _options(config).get('mask_ratio')
  if ratio is not None:  # before the dataset is read (the model checks it again)
    mae.check_ratio(ratio, f'config.objectives.{config.objective}.mask_ratio')
  params = inspect.signature(OBJECTIVES[config.objective]).parameters
  if any(p.kind == p.VAR_KEYWORD for p in params.values()):
    return
  for key in _options(config):
    if key not in params or key in _FROM_CONFIG:
      valid = sorted(set(params) - set(_FROM_CONFIG))
      raise ValueError(f'config.objectives.{config.objective}.{key} is not an option of '
                       f'objective {config.objective!r}; its options: {", ".join(valid)}.')


def make(config: ml_collections.ConfigDict, model: nn.Module) -> Objective:
  """The objective config.objective names, around `model`."""
  check(config)
  factory = OBJECTIVES[config.objective]
  options = _options(config)
  if 'total_steps' in inspect.signature(factory).parameters:
    options['total_steps'] = config.total_steps
  return factory(model, **options)


def is_stateful(objective: Objective) -> bool:
  """Whether the objective keeps state of its own in TrainState.extra[STATE_KEY]."""
  return hasattr(objective, 'update_state')


def init_state(objective: Objective, params: Params) -> Optional[Any]:
  """The objective's own state for fresh `params`; None if it keeps none."""
  return objective.init_state(params) if is_stateful(objective) else None


def result_params(objective: Objective, params: Params, extra: dict) -> Params:
  """The model's parameters the run yields (params.npz, evaluation): e.g. DINO's teacher."""
  own = getattr(objective, 'result_params', None)
  if own is None:
    return objective.model_params(params)
  return own(params, extra[STATE_KEY])


def example_loss(objective: Objective) -> Optional[Callable[[jax.Array, jax.Array], jax.Array]]:
  """The objective's per-example classification loss, if it has one."""
  return getattr(objective, 'example_loss', None)


def auxiliary_params(objective: Objective, params: Params,
                     extra: Optional[dict] = None) -> Optional[Params]:
  """What the run exports beside the model (e.g. MAE's decoder, DINO's heads), if anything."""
  own = getattr(objective, 'result_auxiliary', None)
  if own is not None and extra is not None:
    return own(params, extra[STATE_KEY])
  aux = getattr(objective, 'auxiliary_params', None)
  return None if aux is None else aux(params)


def check_views(objective: Objective, pp: ml_collections.ConfigDict) -> None:
  """One-line errors where a multi-crop objective cannot train on the views `pp` makes."""
  check = getattr(objective, 'check_views', None)
  if check is not None:  # objectives that train on multi-crop views (DINO)
    check(pp.crop, view_counts.counts(pp) if view_counts.enabled(pp) else None)


def train_flops_per_image(objective: Objective, resolution: int,
                          views: Optional[tuple[int, int, int]] = None) -> float:
  """Analytic FLOPs of one training image (3x forward): the objective's, else the model's.

  `views` = (global crops, local crops, local crop size) of multi-crop batches, whose
  objectives count each view (and a teacher's forward-only passes) themselves.
  """
  multi = getattr(objective, 'train_flops_per_image', None)
  if multi is not None:
    return multi(resolution, views or (1, 0, 0))
  own = getattr(objective, 'flops_per_image', None)
  if own is None:
    return flops.model_flops_per_image(objective.model, resolution, train=True)
  return 3.0 * own(resolution)
