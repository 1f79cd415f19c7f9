"""DINO (Caron et al. 2021): self-distillation of a momentum teacher into the student.

The student (params) is trained by gradients; the teacher (an EMA of the student) and
the centre (an EMA of the teacher's mean output) are the objective's state, kept in the
train state's `extra` slot and updated after the optimizer step inside the jitted step
(vit_jax.train.step). Batches carry the views per resolution: `image` [n, G, S, S, C]
(global crops) and `local` [n, L, s, s, C] (local crops) (vit_jax.data.multicrop).

Per step t of T (official main_dino.py):
  teacher probabilities  q_g = softmax((teacher(x_g) - centre) / tau_t(t)), global views g
  student log-probs      log p_v = log_softmax(student(x_v) / tau_s), every view v
  loss = mean over pairs (g, v), v != g, of mean over images of -sum_k q_g log p_v
  centre <- m_c centre + (1 - m_c) mean of the teacher outputs over the global batch
  teacher <- m(t) teacher + (1 - m(t)) student, m(t) = 1 - (1 - m0)(cos(pi t / T) + 1) / 2
tau_t warms up linearly from warmup_teacher_temp to teacher_temp over
warmup_teacher_temp_steps (the official steps it per epoch; here per step). The last
layer of the student's head gets no gradient for freeze_last_layer_steps steps (its
weight decay then only rescales the weight-normalised directions, which changes nothing).
"""
import dataclasses
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp

from vit_jax.models import dino as dino_lib
from vit_jax.train import objective_base

Params = Any
TEACHER, CENTER = 'teacher', 'center'


def check_temperature(value: float, key: str) -> None:
  """One-line error unless value is a finite number > 0."""
  if not isinstance(value, (int, float)) or isinstance(value, bool) or not (
      0 < value < math.inf):
    raise ValueError(f'config.objectives.dino.{key}={value!r} must be a number > 0.')


def check_momentum(value: float, key: str) -> None:
  """One-line error unless 0 <= value <= 1."""
  if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
    raise ValueError(f'config.objectives.dino.{key}={value!r} must lie in [0, 1].')


def momentum_schedule(base: float, total_steps: int):
  """Teacher momentum after optimizer step i (0-based): cosine from base to 1."""
  def m(i):
    progress = jnp.asarray(i, jnp.float32) / max(total_steps, 1)
    return 1.0 - (1.0 - base) * (jnp.cos(jnp.pi * progress) + 1.0) / 2.0
  return m


def teacher_temperature(start: float, end: float, warmup_steps: int):
  """tau_t at step i: linear from start to end over warmup_steps, then end."""
  def tau(i):
    if not warmup_steps:
      return jnp.asarray(end, jnp.float32)
    frac = jnp.clip(jnp.asarray(i, jnp.float32) / warmup_steps, 0.0, 1.0)
    return start + (end - start) * frac
  return tau


def dino_loss(student: jax.Array, teacher: jax.Array, center: jax.Array,
              student_temp: float, teacher_temp: Any) -> tuple[jax.Array, jax.Array]:
  """(loss, teacher outputs' batch mean [K]) of student [V, n, K] and teacher [G, n, K].

  The first G student views are the teacher's G views, in the same order; pairs of the
  same view are skipped.
  """
  log_p = jax.nn.log_softmax(student / student_temp, axis=-1)
  q = jax.nn.softmax((teacher - center) / teacher_temp, axis=-1)
  cross = -jnp.einsum('gnk,vnk->gv', q, log_p) / student.shape[1]  # mean over images
  g, v = cross.shape
  different = 1.0 - jnp.eye(g, v)
  loss = jnp.sum(cross * different) / jnp.sum(different)
  return loss, jnp.mean(teacher.reshape(-1, teacher.shape[-1]), axis=0)


def collapse_metrics(teacher: jax.Array, center: jax.Array,
                     teacher_temp: Any) -> dict[str, jax.Array]:
  """The teacher's entropies, which tell DINO's two collapses apart (in nats, of ln K).

  teacher_entropy: mean over images of H(q); ln K when the outputs are uniform.
  teacher_batch_entropy: H of the batch-mean q; near 0 when one prototype dominates.
  Learning keeps the first well below ln K and the second well above it.
  """
  q = jax.nn.softmax((teacher - center) / teacher_temp, axis=-1)
  entropy = lambda p: -jnp.sum(p * jnp.log(jnp.maximum(p, 1e-30)), axis=-1)  # noqa: E731
  mean_q = jnp.mean(q.reshape(-1, q.shape[-1]), axis=0)
  return {'teacher_entropy': jnp.mean(entropy(q)), 'teacher_batch_entropy': entropy(mean_q)}


def views_first(x: jax.Array) -> jax.Array:
  """[n, V, ...] -> [V * n, ...], view after view (one batch per view)."""
  return jnp.swapaxes(x, 0, 1).reshape((-1,) + x.shape[2:])


@dataclasses.dataclass(frozen=True)
class DinoObjective(objective_base.AroundModel):
  """The DINO objective; its state {'teacher': params, 'center': [K]} lives in `extra`."""
  OWN = dino_lib.HEAD  # the student's head (the teacher's is in `result_auxiliary`)
  net: dino_lib.Dino
  total_steps: int
  student_temp: float  # the defaults: make
  teacher_temp: float
  warmup_teacher_temp: float
  warmup_teacher_temp_steps: int
  momentum_teacher: float
  center_momentum: float
  freeze_last_layer_steps: int

  def __post_init__(self):
    for key in ('student_temp', 'teacher_temp', 'warmup_teacher_temp'):
      check_temperature(getattr(self, key), key)
    for key in ('momentum_teacher', 'center_momentum'):
      check_momentum(getattr(self, key), key)
    for key in ('warmup_teacher_temp_steps', 'freeze_last_layer_steps'):
      value = getattr(self, key)
      if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f'config.objectives.dino.{key}={value!r} must be an integer '
                         '>= 0 (steps).')

  def init_state(self, params: Params) -> dict:
    """The teacher starts as the student; the centre at zero."""
    return {TEACHER: jax.tree.map(jnp.copy, params),
            CENTER: jnp.zeros((self.net.out_dim,), jnp.float32)}

  def result_params(self, params: Params, state: dict) -> Params:
    """The run's result: the teacher's backbone."""
    del params
    return state[TEACHER]['model']

  def result_auxiliary(self, params: Params, state: dict) -> Params:
    """The heads exported beside the result: the teacher's and the student's."""
    return {'teacher': state[TEACHER][dino_lib.HEAD], 'student': params[dino_lib.HEAD]}

  def check_views(self, crop: int, views: Optional[tuple[int, int, int]]) -> None:
    """One-line errors unless the batches hold views DINO can use and the model can cut."""
    if views is None or views[0] < 1:
      raise ValueError("config.objective='dino' needs at least one global crop: set "
                       "config.pp.multicrop.global_pp, e.g. ('dino_global1', "
                       "'dino_global2').")
    num_global, num_local, local_size = views
    if num_global + num_local < 2:
      raise ValueError('config.objective=dino compares different views of an image: '
                       'config.pp.multicrop needs two global crops, or local crops too.')
    ph, pw = tuple(self.model.patches['size'])
    for key, size in (('config.pp.crop', crop),
                      ('config.pp.multicrop.local_crop', local_size if num_local else ph)):
      if size % ph or size % pw:
        raise ValueError(f'{key}={size} is not divisible by the patch size {(ph, pw)} '
                         f'of {self.model.model_name or "the model"}.')

  def views(self, batch: dict) -> list[jax.Array]:
    """The batch's views by resolution: [global [G, n, ...]] (+ [local [L, n, ...]])."""
    if batch['image'].ndim != 5:
      raise ValueError(f"DINO needs multi-crop batches ('image' [n, views, H, W, C]), "
                       f"got 'image' {batch['image'].shape}: set config.pp.multicrop.")
    out = [batch['image']]
    if 'local' in batch and batch['local'].shape[1]:
      out.append(batch['local'])
    return out

  def stateful_loss(self, params: Params, state: dict, batch: dict, rng: jax.Array,
                    step: jax.Array) -> tuple[jax.Array, tuple[dict, dict]]:
    """(loss, (metrics, stats for update_state)) of a multi-crop batch at `step`."""
    views = self.views(batch)
    n, num_global = views[0].shape[:2]
    frozen = step < self.freeze_last_layer_steps
    student = []
    for i, x in enumerate(views):  # one forward per resolution
      out = self.net.project(params, views_first(x), train=True,
                             rng=jax.random.fold_in(rng, i), freeze_last_layer=frozen)
      student.append(out.reshape(x.shape[1], n, -1))
    student = jnp.concatenate(student, axis=0)
    teacher_params = jax.lax.stop_gradient(state[TEACHER])
    teacher = self.net.project(teacher_params, views_first(views[0]), train=False)
    teacher = teacher.reshape(num_global, n, -1)
    tau = teacher_temperature(self.warmup_teacher_temp, self.teacher_temp,
                              self.warmup_teacher_temp_steps)(step)
    loss, batch_center = dino_loss(student, teacher, state[CENTER], self.student_temp, tau)
    metrics = {'teacher_temp': tau, **collapse_metrics(teacher, state[CENTER], tau)}
    return loss, (metrics, {CENTER: batch_center})

  def update_state(self, state: dict, params: Params, stats: dict, step: jax.Array) -> dict:
    """After optimizer step `step` (1-based): the teacher and centre EMAs."""
    m = momentum_schedule(self.momentum_teacher, self.total_steps)(step - 1)
    teacher = jax.tree.map(lambda t, s: m * t + (1.0 - m) * s.astype(t.dtype),
                           state[TEACHER], params)
    c = self.center_momentum
    return {TEACHER: teacher, CENTER: c * state[CENTER] + (1.0 - c) * stats[CENTER]}

  def train_flops_per_image(self, global_size: int, views: tuple[int, int, int]) -> float:
    """Student forward+backward (3x) on every view, teacher forward on the global ones."""
    num_global, num_local, local_size = views
    student = (num_global * self.net.flops_per_view(global_size)
               + num_local * self.net.flops_per_view(local_size))
    return 3.0 * student + num_global * self.net.flops_per_view(global_size)


def make(model: Any, *, total_steps: int, out_dim: int = 65536, hidden_dim: int = 2048,
         bottleneck_dim: int = 256, num_layers: int = 3, norm_last_layer: bool = True,
         student_temp: float = 0.1, teacher_temp: float = 0.04,
         warmup_teacher_temp: float = 0.04, warmup_teacher_temp_steps: int = 0,
         momentum_teacher: float = 0.996, center_momentum: float = 0.9,
         freeze_last_layer_steps: int = 0) -> DinoObjective:
  """The DINO objective around `model` (options: config.objectives.dino; steps count
  optimizer steps). out_dim: prototypes K; norm_last_layer: the weight norm g fixed to 1;
  tau_t warms up linearly from warmup_teacher_temp to teacher_temp over
  warmup_teacher_temp_steps (0: none); momentum_teacher rises to 1 by a cosine over the run.
  """
  return DinoObjective(
      dino_lib.Dino(model, out_dim, hidden_dim, bottleneck_dim, num_layers,
                    norm_last_layer),
      int(total_steps), student_temp, teacher_temp, warmup_teacher_temp,
      warmup_teacher_temp_steps, momentum_teacher, center_momentum,
      freeze_last_layer_steps)

