"""The Objective base class: every method the train step, the loop and the tools call.

A plug-in (vit_jax.train.objectives.register) subclasses `Objective` and overrides only
what it changes; the defaults describe a stateless objective that trains the model's
parameters alone, in their published layout. `AroundModel` is the base of objectives
that train something beside the model (params {'model': ..., OWN: ...}).

The hooks, by who calls them:
  init, loss, model_params, with_model_params    the step, the loop, fine-tuning starts
  init_state, stateful_loss, update_state        the step (a stateful objective: DINO)
  result_params, result_auxiliary, auxiliary_params  the export (params.npz, beside it)
  example_loss                                   evaluation's per-example loss
  check_views                                    the config check (multi-crop batches)
  flops_per_image, train_flops_per_image         MFU and the benchmark
  on_mesh                                        the loop, once its mesh exists
"""
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.models import flops

Params = Any
Views = tuple[int, int, int]  # (global crops, local crops, local crop size)


class Objective:
  """What is learned: the trainable parameters and what a batch costs.

  Subclasses set `model` (a field or a property) and override `loss`; the rest has
  defaults. A stateful objective returns its state from `init_state` (not None), reads it
  in `stateful_loss` and advances it in `update_state`; the trainer keeps it in
  TrainState.extra, sharded, checkpointed and resumed with the rest.
  """
  model: nn.Module

  def init(self, rng: jax.Array, image_shape: tuple[int, ...]) -> Params:
    """The trainable parameters, freshly initialised: by default the model's."""
    return self.model.init(rng, jnp.zeros(image_shape, jnp.float32))['params']

  def loss(self, params: Params, batch: dict, rng: jax.Array) -> tuple[jax.Array, dict]:
    """(mean loss, extra metrics as scalars) of a training batch."""
    raise NotImplementedError(f'{type(self).__name__} does not define loss().')

  def model_params(self, params: Params) -> Params:
    """The model's parameters in the published layout: by default all of `params`."""
    return params

  def with_model_params(self, params: Params, model_params: Params) -> Params:
    """`params` with the model's part replaced (to start from a checkpoint)."""
    del params
    return model_params

  def auxiliary_params(self, params: Params) -> Optional[Params]:
    """What the run exports beside the model (<objective>_params.npz); None: nothing."""
    del params
    return None

  def init_state(self, params: Params) -> Optional[Any]:
    """The objective's own state for fresh `params`; None: it keeps none."""
    del params
    return None

  def stateful_loss(self, params: Params, state: Optional[Any], batch: dict,
                    rng: jax.Array, step: jax.Array) -> tuple[jax.Array, tuple[dict, dict]]:
    """(loss, (metrics, statistics for update_state)) with the state; by default `loss`."""
    del state, step
    loss, metrics = self.loss(params, batch, rng)
    return loss, (metrics, {})

  def update_state(self, state: Any, params: Params, stats: dict, step: jax.Array) -> Any:
    """The state after optimizer step `step` (1-based), from the new params and stats."""
    del params, stats, step
    return state

  def result_params(self, params: Params, state: Optional[Any]) -> Params:
    """The model's parameters the run yields (params.npz, evaluation)."""
    del state
    return self.model_params(params)

  def result_auxiliary(self, params: Params, state: Optional[Any]) -> Optional[Params]:
    """What the run exports beside its result; by default `auxiliary_params`."""
    del state
    return self.auxiliary_params(params)

  @property
  def example_loss(self) -> Optional[Callable[[jax.Array, jax.Array], jax.Array]]:
    """Per-example loss of logits against labels (what evaluation reports), if any."""
    return None

  def check_views(self, crop: int, views: Optional[Views]) -> None:
    """One-line errors where the objective cannot train on these views; None: one image."""
    del crop, views

  def on_mesh(self, mesh: jax.sharding.Mesh) -> 'Objective':
    """The objective with its constants (a frozen teacher) on `mesh`; by default itself."""
    del mesh
    return self

  def flops_per_image(self, resolution: int) -> float:
    """Forward matmul FLOPs of one image: by default the model's."""
    return flops.model_flops_per_image(self.model, resolution, train=False)

  def train_flops_per_image(self, resolution: int, views: Views) -> float:
    """FLOPs of one training image: forward and backward, 3x forward by default."""
    del views
    return 3.0 * self.flops_per_image(resolution)


class AroundModel(Objective):
  """An objective whose parameters are {'model': the ViT, OWN: what it adds}."""
  OWN = ''
  net: Any  # e.g. models.mae.MaskedAutoencoder, models.dino.Dino

  @property
  def model(self) -> nn.Module:
    """The model the objective trains (its parameters are params['model'])."""
    return self.net.model

  def init(self, rng: jax.Array, image_shape: tuple[int, ...]) -> Params:
    """Fresh parameters of the model and of what the objective adds."""
    return self.net.init(rng, image_shape)

  def model_params(self, params: Params) -> Params:
    """The model's parameters, in the published layout."""
    return params['model']

  def with_model_params(self, params: Params, model_params: Params) -> Params:
    """`params` with the model's part replaced."""
    return {**params, 'model': model_params}

  def auxiliary_params(self, params: Params) -> Params:
    """What the objective trains beside the ViT (written as <objective>_params.npz)."""
    return params[self.OWN]
