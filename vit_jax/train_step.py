"""The pure training and evaluation steps, shared by the trainer and the benchmark."""
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from vit_jax import sharding

LOSSES = ('softmax_xent', 'sigmoid_xent')


@flax.struct.dataclass
class TrainState:
  """Everything a run needs to continue: step, parameters, optimizer state, base key."""
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array


def global_norm(tree: Any) -> jax.Array:
  """L2 norm of all leaves of a pytree together."""
  return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32)))
                      for x in jax.tree.leaves(tree)))


def loss_fn(logits: jax.Array, labels: jax.Array, kind: str) -> jax.Array:
  """Per-example loss: softmax cross-entropy or sigmoid cross-entropy summed over classes."""
  if kind == 'softmax_xent':
    return -jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1)
  if kind == 'sigmoid_xent':
    return jnp.sum(optax.sigmoid_binary_cross_entropy(logits, labels), axis=-1)
  raise ValueError(f'config.loss={kind!r} is unknown; use one of {LOSSES}.')


def init_state(model: nn.Module, tx: optax.GradientTransformation,
               rng: jax.Array, image_shape: tuple) -> TrainState:
  """Initialises a TrainState (jit it with out_shardings to create it sharded)."""
  init_rng, state_rng = jax.random.split(rng)
  params = model.init(init_rng, jnp.zeros(image_shape, jnp.float32))['params']
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=tx.init(params), rng=state_rng)


def make_train_step(model: nn.Module, tx: optax.GradientTransformation,
                    config: ml_collections.ConfigDict,
                    schedule: Callable[[Any], Any] | None = None) -> Callable:
  """Returns step(state, batch) -> (state, metrics) with gradient accumulation.

  With accum_steps > 1 the batch is split into micro-batches whose gradients
  are averaged, which equals one step on the whole batch. Micro-batch j takes
  rows j, j + accum, ... so that each micro-batch stays spread over all devices.
  """
  accum = config.accum_steps
  kind = config.loss
  if kind not in LOSSES:
    raise ValueError(f'config.loss={kind!r} is unknown; use one of {LOSSES}.')

  def micro_loss(params, images, labels, rng):
    logits = model.apply({'params': params}, images, train=True,
                         rngs={'dropout': rng})
    return jnp.mean(loss_fn(logits, labels, kind))

  grad_fn = jax.value_and_grad(micro_loss)

  def step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    rng = jax.random.fold_in(state.rng, state.step)
    images, labels = batch['image'], batch['label']
    if accum == 1:
      loss, grads = grad_fn(state.params, images, labels, rng)
    else:
      split = lambda x: jnp.swapaxes(  # noqa: E731
          x.reshape((x.shape[0] // accum, accum) + x.shape[1:]), 0, 1)

      def body(carry, xs):
        i, micro_images, micro_labels = xs
        loss, grads = grad_fn(state.params, micro_images, micro_labels,
                              jax.random.fold_in(rng, i))
        return jax.tree.map(jnp.add, carry, (loss, grads)), None

      zeros = (jnp.zeros((), jnp.float32),
               jax.tree.map(jnp.zeros_like, state.params))
      (loss, grads), _ = jax.lax.scan(
          body, zeros, (jnp.arange(accum), split(images), split(labels)))
      loss, grads = jax.tree.map(lambda x: x / accum, (loss, grads))
    grad_norm = global_norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {'train_loss': loss, 'grad_norm': grad_norm}
    if schedule is not None:
      metrics['learning_rate'] = schedule(state.step)
    new_state = state.replace(step=state.step + 1, params=params,
                              opt_state=opt_state)
    return new_state, metrics

  return step


def jit_train_step(step: Callable, mesh: jax.sharding.Mesh, state_shardings: Any,
                   donate: bool = True) -> Callable:
  """Jits step(state, batch) the one way the trainer runs it and the benchmark times it.

  State in and out with its shardings (donated, so it is updated in place),
  the batch split over the mesh, and activation constraints so FSDP gathers
  weights rather than whole-batch activations.
  """
  return jax.jit(
      sharding.with_activation_constraints(step, mesh),
      in_shardings=(state_shardings, sharding.batch_sharding(mesh)),
      out_shardings=(state_shardings, None),
      donate_argnums=0 if donate else ())


def make_eval_step(model: nn.Module, kind: str) -> Callable:
  """Returns eval(params, batch) -> sums of correct predictions, loss and examples."""

  def eval_step(params: Any, batch: dict) -> dict:
    logits = model.apply({'params': params}, batch['image'], train=False)
    mask = batch['mask']
    labels = batch['label']
    # Top-1 is right when the predicted class carries the largest target
    # (the class of a one-hot label, any class of a multi-hot one).
    top1 = jnp.argmax(logits, axis=-1)
    picked = jnp.take_along_axis(labels, top1[:, None], axis=-1)[:, 0]
    correct = picked >= jnp.max(labels, axis=-1)
    return {
        'correct': jnp.sum(correct * mask),
        'loss': jnp.sum(loss_fn(logits, labels, kind) * mask),
        'count': jnp.sum(mask),
    }

  return eval_step
