"""The pure training step, shared by the trainer, the benchmark and the memory tool."""
from typing import Any, Callable, Optional

import flax
import jax
import jax.numpy as jnp
import optax

from vit_jax.models import fp8
from vit_jax.parallel import sharding
from vit_jax.train import objectives

# TrainState.extra's entry of the fp8_delayed amax histories (vit_jax/models/fp8.py).
FP8_KEY = 'fp8_histories'


@flax.struct.dataclass
class TrainState:
  """Everything a run needs to continue: step, parameters, optimizer state, base key.

  `extra` holds state that gradients do not train (a weight EMA, a teacher, a running
  centre): named entries, updated after the optimizer inside the step; {} when unused.
  A stateful objective's own state is extra['objective'] (objectives.STATE_KEY); the
  fp8_delayed matmuls' amax histories are extra[FP8_KEY].
  """
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array
  extra: Any


ExtraInit = Callable[[Any], dict]
ExtraUpdate = Callable[[dict, Any, jax.Array], dict]


def init_state(objective: objectives.Objective, tx: optax.GradientTransformation,
               rng: jax.Array, image_shape: tuple,
               init_extra: Optional[ExtraInit] = None) -> TrainState:
  """Initialises a TrainState (jit it with out_shardings to create it sharded).

  `init_extra(params)` fills the extra slot (e.g. ema.init_extra); default: empty.
  The fp8_delayed amax histories the model creates move from the parameters to the
  extra slot: the optimizer, weight decay and the EMA never see them.
  """
  init_rng, state_rng = jax.random.split(rng)
  params, histories = fp8.split_histories(objective.init(init_rng, image_shape))
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=tx.init(params), rng=state_rng,
                    extra=initial_extra(objective, params, init_extra, histories))


def initial_extra(objective: objectives.Objective, params: Any,
                  init_extra: Optional[ExtraInit] = None,
                  histories: Optional[dict] = None) -> dict:
  """The extra slot for `params`: init_extra's entries, the objective's own state and
  the fp8 amax `histories` (kept by a start from pretrained parameters)."""
  extra = dict(init_extra(params)) if init_extra else {}
  own = objective.init_state(params)
  if own is not None:
    extra[objectives.STATE_KEY] = own
  if histories:
    extra[FP8_KEY] = histories
  return extra


def make_train_step(objective: objectives.Objective, tx: optax.GradientTransformation,
                    accum_steps: int = 1,
                    schedule: Optional[Callable[[Any], Any]] = None,
                    update_extra: Optional[ExtraUpdate] = None) -> Callable:
  """Returns step(state, batch) -> (state, metrics) with gradient accumulation.

  With accum_steps > 1 the batch is split into micro-batches whose gradients
  are averaged, which equals one step on the whole batch. Micro-batch j takes
  rows j, j + accum, ... so that each micro-batch stays spread over all devices.
  Metrics: train_loss, grad_norm, learning_rate (with a schedule) and the
  objective's own metrics. A stateful objective (its init_state is in
  extra[objectives.STATE_KEY]) reads its state in the loss and updates it after the
  optimizer update from the loss's statistics (averaged over micro-batches); then
  `update_extra(extra, new params, step)` runs (e.g. ema.make_update). Neither gets
  gradients or optimizer state. With fp8_delayed matmuls (extra[FP8_KEY]) the loss
  sees the amax histories as parameter leaves; their "gradients" are the maxima the
  step met (the largest over micro-batches), which advance the histories.
  """
  accum = accum_steps
  value_and_grad = jax.value_and_grad(objective.stateful_loss, has_aux=True)

  def step(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
    rng = jax.random.fold_in(state.rng, state.step)
    stateful = objectives.STATE_KEY in state.extra
    own = state.extra.get(objectives.STATE_KEY)
    histories = state.extra.get(FP8_KEY)

    def grad_fn(p, b, r):  # ((loss, aux), grads), the maxima the fp8 matmuls met
      out, grads = value_and_grad(fp8.merge_histories(p, histories), own, b, r, state.step)
      grads, seen = fp8.split_histories(grads) if histories else (grads, {})
      return (out, grads), seen

    if accum == 1:
      ((loss, (extra, stats)), grads), seen = grad_fn(state.params, batch, rng)
    else:
      split = lambda x: jnp.swapaxes(  # noqa: E731
          x.reshape((x.shape[0] // accum, accum) + x.shape[1:]), 0, 1)

      def body(carry, xs):
        i, micro = xs
        out, seen = grad_fn(state.params, micro, jax.random.fold_in(rng, i))
        return (jax.tree.map(jnp.add, carry[0], out),
                jax.tree.map(jnp.maximum, carry[1], seen)), None

      zeros = jax.tree.map(
          jnp.zeros_like,
          jax.eval_shape(grad_fn, state.params, jax.tree.map(lambda x: x[::accum], batch),
                         rng))
      (((loss, (extra, stats)), grads), seen), _ = jax.lax.scan(
          body, zeros, (jnp.arange(accum), jax.tree.map(split, batch)))
      loss, extra, stats, grads = jax.tree.map(lambda x: x / accum,
                                               (loss, extra, stats, grads))
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {'train_loss': loss, 'grad_norm': optax.tree.norm(grads), **extra}
    if schedule is not None:
      metrics['learning_rate'] = schedule(state.step)
    extra = state.extra
    if histories:
      extra = {**extra, FP8_KEY: fp8.advance(histories, seen)}
    if stateful:
      extra = {**extra, objectives.STATE_KEY: objective.update_state(
          own, params, stats, state.step + 1)}
    if update_extra is not None:
      extra = update_extra(extra, params, state.step + 1)
    new_state = state.replace(step=state.step + 1, params=params,
                              opt_state=opt_state, extra=extra)
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
