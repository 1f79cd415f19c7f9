"""Training objectives chosen by name: what the trainable parameters are and what a batch costs.

`config.objective` names an entry of OBJECTIVES (or one added with `register`): a factory
`factory(model, **options)` whose keyword defaults are the objective's options, declared
there only; `config.objectives.<name>` is derived from them (`defaults`, read by
vit_jax.configs.base). Every objective subclasses `Objective` (vit_jax.train.objective_base),
whose methods the step and the loop call, with defaults for all but `loss`: `init` makes
the trainable parameter tree, `loss` scores a batch, and `model_params` returns the part in
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

`distill` (vit_jax.train.distill) trains the model against a frozen teacher read from a
checkpoint: the teacher's parameters are constants of the step (placed on the mesh by
`on_mesh`), not state, so neither the optimizer nor the checkpoint holds them.
"""
import dataclasses
import inspect
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from vit_jax.data import view_counts
from vit_jax.models import mae
from vit_jax.models import masked_patch
from vit_jax.train import dino
from vit_jax.train import distill
from vit_jax.train import objective_base

Params = Any
STATE_KEY = 'objective'  # a stateful objective's entry of TrainState.extra
# The base class every objective subclasses (vit_jax.train.objective_base).
Objective = objective_base.Objective


def softmax_xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Per-example softmax cross-entropy against (soft) one-hot labels."""
  return optax.softmax_cross_entropy(logits, labels)


def sigmoid_xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
  """Per-example sigmoid cross-entropy summed over classes (multi-label)."""
  return jnp.sum(optax.sigmoid_binary_cross_entropy(logits, labels), axis=-1)


LOSSES = {'softmax_xent': softmax_xent, 'sigmoid_xent': sigmoid_xent}


@dataclasses.dataclass(frozen=True)
class Supervised(Objective):
  """Classification with labels: the model's logits against the batch's targets."""
  model: nn.Module
  loss_name: str

  def __post_init__(self):
    if self.loss_name not in LOSSES:
      raise ValueError(f'config.objectives.supervised.loss={self.loss_name!r} is unknown; '
                       f'use one of {", ".join(LOSSES)}.')

  @property
  def example_loss(self) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """Per-example loss of logits against labels (what evaluation reports)."""
    return LOSSES[self.loss_name]

  def loss(self, params: Params, batch: dict, rng: jax.Array) -> tuple[jax.Array, dict]:
    logits = self.model.apply({'params': params}, batch['image'], train=True,
                              rngs={'dropout': rng})
    return jnp.mean(self.example_loss(logits, batch['label'])), {}


def _supervised(model: nn.Module, *, loss: str = 'softmax_xent') -> Supervised:
  """Options: loss, 'softmax_xent' | 'sigmoid_xent' (multi-label)."""
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
class MaskedPatch(objective_base.AroundModel):
  """The ViT paper's self-supervision: predict corrupted patches' targets; no labels."""
  OWN = 'masked_patch'  # the [mask] embedding and the prediction head
  net: masked_patch.MaskedPatchPredictor

  def loss(self, params: Params, batch: dict, rng: jax.Array) -> tuple[jax.Array, dict]:
    images = batch['image']
    out, corruption = self.net.predict(params, images, rng, train=True)
    return patch_prediction_loss(out.astype(jnp.float32), self.net.targets(images),
                                 corruption.chosen, self.net.classes)


@dataclasses.dataclass(frozen=True)
class Mae(objective_base.AroundModel):
  """Masked autoencoding: reconstruct the left-out patches' pixels; no labels."""
  OWN = 'decoder'  # with its mask token: what reconstructions need beside the ViT
  net: mae.MaskedAutoencoder
  norm_pix_loss: bool

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
  """Options: mask_ratio of the patches corrupted per image; of those, replace_mask get
  the learnable [mask] embedding and replace_random another patch's (the rest stay);
  target 'mean_color' | 'downsized' | 'pixels'; bits of colour per channel of the class
  targets; downsized: 'downsized' shrinks patches to downsized x downsized colours."""
  return MaskedPatch(masked_patch.MaskedPatchPredictor(
      model, mask_ratio, replace_mask, replace_random, target, bits, downsized))


def _mae(model: nn.Module, *, mask_ratio: float = 0.75, decoder_width: int = 512,
         decoder_depth: int = 8, decoder_heads: int = 16, decoder_mlp_dim: int = 2048,
         posemb: str = 'sincos2d', norm_pix_loss: bool = True) -> Mae:
  """Options: mask_ratio of the patches hidden from the encoder per image; the decoder's
  shape; posemb 'sincos2d' (fixed, the paper's) | 'learn'; norm_pix_loss: targets are
  each patch's pixels normalised to mean 0, variance 1."""
  return Mae(mae.MaskedAutoencoder(model, mask_ratio, decoder_width, decoder_depth,
                                   decoder_heads, decoder_mlp_dim, posemb),
             norm_pix_loss)


# name -> factory(model, **config.objectives.<name>) -> Objective
# Factories taking a `total_steps` argument get config.total_steps (schedules over the run).
OBJECTIVES: dict[str, Callable[..., Objective]] = {
    'supervised': _supervised, 'masked_patch': _masked_patch, 'mae': _mae,
    'dino': dino.make, distill.NAME: distill.make}
_FROM_CONFIG = ('model', 'total_steps')
# name -> check(options with their defaults): the one-line errors an objective can tell
# before the dataset is read and the model built (e.g. a teacher file that does not exist).
OPTION_CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    distill.NAME: distill.check_options}


def register(name: str, factory: Callable[..., Objective],
             check: Optional[Callable[[dict[str, Any]], None]] = None) -> None:
  """Makes `factory(model, **options)` selectable as config.objective=name.

  The factory's keyword defaults are the options (config.objectives.<name>, derived by
  vit_jax.configs.base from `defaults`); it returns an `Objective` subclass. `check`
  (optional) takes the options and raises one-line errors before any data is read.
  """
  OBJECTIVES[name] = factory
  OPTION_CHECKS.pop(name, None)  # a replaced objective's check goes with it
  if check is not None:
    OPTION_CHECKS[name] = check


def _parameters(name: str) -> dict[str, inspect.Parameter]:
  return dict(inspect.signature(OBJECTIVES[name]).parameters)


def defaults(name: str) -> dict[str, Any]:
  """The options objective `name` takes, with their defaults (its factory's keywords)."""
  return {key: p.default for key, p in _parameters(name).items()
          if key not in _FROM_CONFIG and p.default is not p.empty}


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
  params = _parameters(config.objective)
  takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
  for key in [] if takes_any else _options(config):
    if key not in params or key in _FROM_CONFIG:
      valid = sorted(set(params) - set(_FROM_CONFIG))
      raise ValueError(f'config.objectives.{config.objective}.{key} is not an option of '
                       f'objective {config.objective!r}; its options: {", ".join(valid)}.')
  if config.objective in OPTION_CHECKS:
    OPTION_CHECKS[config.objective]({**defaults(config.objective), **_options(config)})


def make(config: ml_collections.ConfigDict, model: nn.Module) -> Objective:
  """The objective config.objective names, around `model`."""
  check(config)
  factory = OBJECTIVES[config.objective]
  options = _options(config)
  if 'total_steps' in _parameters(config.objective):
    options['total_steps'] = config.total_steps
  objective = factory(model, **options)
  if not isinstance(objective, Objective):
    raise TypeError(f'objective {config.objective!r}: its factory returned a '
                    f'{type(objective).__name__}, not a subclass of objectives.Objective.')
  return objective


def unused_options(config: ml_collections.ConfigDict) -> list[tuple[str, str, Any]]:
  """(objective, key, value) of options set for objectives the run does not train.

  An option counts as set where it differs from its factory's default or the factory
  does not take it (a forgotten --config.objective?).
  """
  out = []
  for name, options in config.get('objectives', {}).items():
    if name == config.objective or name not in OBJECTIVES:
      continue
    own = defaults(name)
    out.extend((name, key, value) for key, value in options.items()
               if key not in own or own[key] != value)
  return out


def result_params(objective: Objective, params: Params, extra: dict) -> Params:
  """The model's parameters the run yields (params.npz, evaluation): e.g. DINO's teacher."""
  return objective.result_params(params, extra.get(STATE_KEY))


def auxiliary_params(objective: Objective, params: Params,
                     extra: Optional[dict] = None) -> Optional[Params]:
  """What the run exports beside the model (e.g. MAE's decoder, DINO's heads), if anything."""
  if extra is None:
    return objective.auxiliary_params(params)
  return objective.result_auxiliary(params, extra.get(STATE_KEY))


def check_views(objective: Objective, pp: ml_collections.ConfigDict) -> None:
  """One-line errors where a multi-crop objective cannot train on the views `pp` makes."""
  objective.check_views(pp.crop, view_counts.counts(pp) if view_counts.enabled(pp)
                        else None)


def train_flops_per_image(objective: Objective, resolution: int,
                          views: Optional[objective_base.Views] = None) -> float:
  """Analytic FLOPs of one training image (3x forward) at `resolution`.

  `views` = (global crops, local crops, local crop size) of multi-crop batches, whose
  objectives count each view (and a teacher's forward-only passes) themselves.
  """
  return objective.train_flops_per_image(resolution, views or (1, 0, 0))
