"""Knowledge distillation from a frozen teacher: DeiT's two forms, logit KD, big_vision's.

The teacher is any classifier checkpoint the project reads (a vit_jax workdir or
params.npz, a timm state dict, a transformers directory; any family), run at its own
resolution: the student's batch, already augmented (and mixed), is resized for it inside
the step, so teacher and student always see the same crop. Its parameters are constants
of the step, not trained state: no gradients, no optimizer state, nothing in the train
checkpoint; a resumed run reads them again from the file (`on_mesh` places them on the
run's devices once).

Modes (`config.objectives.distill.mode`), with s the student's logits, t the teacher's,
y the batch's (possibly smoothed or mixed) labels, CE cross-entropy, T the temperature:
  hard     DeiT's hard distillation (needs model.distilled=True): the class head learns y,
           the distillation head the teacher's argmax:
           (1 - alpha) CE(s_cls, y) + alpha CE(s_dist, argmax t)
  soft     DeiT's soft distillation (model.distilled=True), its normalisation kept
           (KL summed over the batch and classes, divided by their product):
           (1 - alpha) CE(s_cls, y) + alpha T^2 KL(softmax(t/T) || softmax(s_dist/T)) / K
  logits   Hinton's logit distillation, any student (a distilled one: its averaged heads):
           (1 - alpha) CE(s, y) + alpha T^2 KL(softmax(t/T) || softmax(s/T))
  patient  big_vision's "patient and consistent" function matching (Beyer et al. 2022):
           T^2 KL(softmax(t/T) || softmax(s/T)) alone; labels are not read (alpha neither).
Values from facebookresearch/deit (main.py, losses.py): hard, alpha 0.5, tau 1.0;
big_vision configs/proj/distill/bit_i1k.py: kl, t 1.0, mixup, 1200 epochs.
At evaluation a distilled student's two heads are averaged (the model's own output).
"""
import dataclasses
import logging
import math
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from vit_jax import errors
from vit_jax.inference import load
from vit_jax.models import families
from vit_jax.models import flops
from vit_jax.models import naming
from vit_jax.train import objective_base

Params = Any
NAME = 'distill'
MODES = ('hard', 'soft', 'logits', 'patient')
_TOKEN_MODES = ('hard', 'soft')  # read the distillation head
_HEADS = ('head', 'head_dist')   # a distilled ViT's class and distillation heads


def _key(key: str) -> str:
  return f'config.objectives.{NAME}.{key}'


def check_mode(mode: str, key: str) -> None:
  """One-line error naming `key` unless `mode` is one of MODES."""
  if mode not in MODES:
    hint = errors.did_you_mean(str(mode), MODES)
    raise ValueError(f'{key}={mode!r} is unknown; ' + (
        f'{hint} (modes: {", ".join(MODES)})' if hint else f'use one of {", ".join(MODES)}.'))


def check_options(options: dict[str, Any]) -> None:
  """One-line errors for the options that need no model: mode, numbers, the teacher's file."""
  _check_values(options)
  try:
    load.resolve_checkpoint(options['teacher'])
  except (OSError, ValueError) as e:
    raise type(e)(f'{_key("teacher")}: {errors.first_line(e, None)}') from None


def _check_values(options: dict[str, Any]) -> None:
  """check_options without reading the teacher's file (which load_teacher reads)."""
  check_mode(options['mode'], _key('mode'))
  alpha, tau, resolution = options['alpha'], options['tau'], options['teacher_resolution']
  if not _is_number(alpha) or not 0 <= alpha <= 1:
    raise ValueError(f'{_key("alpha")}={alpha!r} must lie in [0, 1] (the teacher '
                     "term's weight; DeiT's 0.5).")
  if not _is_number(tau) or not 0 < tau < math.inf:
    raise ValueError(f'{_key("tau")}={tau!r} must be a number > 0 (the temperature; '
                     "DeiT's 1.0).")
  if not isinstance(resolution, int) or isinstance(resolution, bool) or resolution < 0:
    raise ValueError(f'{_key("teacher_resolution")}={resolution!r} must be an integer '
                     ">= 0 (pixels; 0 = the teacher's own).")
  if not options['teacher']:
    raise ValueError(f"{_key('teacher')} is not set: name the teacher's checkpoint (a "
                     'vit_jax workdir or params.npz, a timm or transformers checkpoint).')


def _is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True, eq=False)
class Teacher:
  """A frozen classifier: its module, its parameters (constants) and input resolution."""
  model: nn.Module
  params: Params
  resolution: int
  path: str

  @property
  def num_classes(self) -> int:
    """Width of the teacher's head."""
    return int(families.fields(self.model).get('num_classes') or 0)

  def logits(self, images: jax.Array) -> jax.Array:
    """float32 logits of `images` (NHWC in [-1, 1]), resized to the teacher's resolution."""
    n, h, w, c = images.shape
    if (h, w) != (self.resolution, self.resolution):
      images = jax.image.resize(images, (n, self.resolution, self.resolution, c),
                                'bilinear')
    out = self.model.apply({'params': self.params}, images, train=False)
    return jax.lax.stop_gradient(out.astype(jnp.float32))

  def flops_per_image(self) -> float:
    """Forward matmul FLOPs of one image at the teacher's resolution."""
    return flops.model_flops_per_image(self.model, self.resolution, train=False)

  def on_mesh(self, mesh: jax.sharding.Mesh) -> 'Teacher':
    """The teacher with its parameters replicated over `mesh` (placed once, not per step)."""
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return dataclasses.replace(self, params=jax.device_put(self.params, replicated))


def load_teacher(path: str, model_name: str = '', resolution: int = 0,
                 dtype: Any = None) -> Teacher:
  """The teacher from its checkpoint (any format the project reads), at `resolution` (0: its own)."""
  overrides = {} if dtype is None else {'dtype': dtype}
  try:
    loaded = load.load_model(model_name or None, path, resolution or None, **overrides)
  except (OSError, ValueError) as e:
    raise type(e)(f'{_key("teacher")}={path}: {errors.first_line(e, None)}') from None
  params = jax.tree.map(jnp.asarray, loaded.params)
  return Teacher(loaded.model, params, loaded.resolution, path)


def kl_per_example(student: jax.Array, teacher: jax.Array, tau: float) -> jax.Array:
  """tau^2 KL(softmax(teacher / tau) || softmax(student / tau)) per example [n]."""
  log_q = jax.nn.log_softmax(teacher / tau, axis=-1)
  log_p = jax.nn.log_softmax(student / tau, axis=-1)
  return tau ** 2 * jnp.sum(jnp.exp(log_q) * (log_q - log_p), axis=-1)


def distill_loss(mode: str, student: Any, teacher: jax.Array, labels: Optional[jax.Array],
                 alpha: float, tau: float) -> tuple[jax.Array, dict]:
  """(mean loss, metrics) of a batch; `student` is (class, distillation) logits in the
  DeiT modes, else the logits [n, K]."""
  if mode in _TOKEN_MODES:
    cls, dist = student
    base = jnp.mean(optax.softmax_cross_entropy(cls, labels))
    if mode == 'hard':
      term = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(
          dist, jnp.argmax(teacher, axis=-1)))
    else:  # DeiT divides the summed KL by outputs_kd.numel() = n * K
      term = jnp.mean(kl_per_example(dist, teacher, tau)) / teacher.shape[-1]
    output = (cls + dist) / 2
    loss = (1 - alpha) * base + alpha * term
  else:
    output = student
    term = jnp.mean(kl_per_example(student, teacher, tau))
    if mode == 'patient':
      loss = term
    else:
      base = jnp.mean(optax.softmax_cross_entropy(student, labels))
      loss = (1 - alpha) * base + alpha * term
  agree = jnp.mean((jnp.argmax(output, -1) == jnp.argmax(teacher, -1)).astype(jnp.float32))
  return loss, {'distill_loss': term, 'teacher_agreement': agree}


@dataclasses.dataclass(frozen=True, eq=False)
class Distill(objective_base.Objective):
  """The student (`model`, trained) learns from labels and a frozen `teacher`."""
  model: nn.Module
  teacher: Teacher
  mode: str
  alpha: float
  tau: float

  @property
  def example_loss(self):
    """Evaluation's per-example loss: cross-entropy against the labels."""
    return optax.softmax_cross_entropy

  def _student(self, params: Params, images: jax.Array, rng: jax.Array) -> Any:
    """The student's logits; in the DeiT modes its (class, distillation) heads apart."""
    apply = lambda **kw: self.model.apply(  # noqa: E731
        {'params': params}, images, train=True, rngs={'dropout': rng}, **kw)
    if self.mode not in _TOKEN_MODES:
      return apply()
    _, state = apply(capture_intermediates=lambda m, _: m.name in _HEADS,
                     mutable=['intermediates'])
    found = state['intermediates']
    return tuple(found[name]['__call__'][0].astype(jnp.float32) for name in _HEADS)

  def loss(self, params: Params, batch: dict, rng: jax.Array) -> tuple[jax.Array, dict]:
    images = batch['image']
    return distill_loss(self.mode, self._student(params, images, rng),
                        self.teacher.logits(images), batch.get('label'), self.alpha,
                        self.tau)

  def on_mesh(self, mesh: jax.sharding.Mesh) -> 'Distill':
    """The objective with the teacher's parameters on the run's devices."""
    return dataclasses.replace(self, teacher=self.teacher.on_mesh(mesh))

  def check_views(self, crop: int, views: Optional[objective_base.Views]) -> None:
    """One-line error for multi-crop batches: teacher and student see one image."""
    del crop
    if views is not None:
      raise ValueError(f'config.objective={NAME!r} trains on one view of each image; '
                       'unset config.pp.multicrop.')

  def train_flops_per_image(self, resolution: int, views: objective_base.Views) -> float:
    """Student forward and backward (3x) plus the teacher's forward at its resolution."""
    del views
    return 3.0 * self.flops_per_image(resolution) + self.teacher.flops_per_image()


def make(model: nn.Module, *, teacher: str = '', mode: str = 'hard', alpha: float = 0.5,
         tau: float = 1.0, teacher_model: str = '', teacher_resolution: int = 0) -> Distill:
  """The distill objective around `model`. teacher: the checkpoint (path, workdir or a name
  the loaders take); mode 'hard' | 'soft' | 'logits' | 'patient'; alpha: the teacher term's
  weight (not read by 'patient'); tau: the temperature (soft, logits, patient);
  teacher_model: its preset or timm name where the file does not tell ('');
  teacher_resolution: its input size (0: the checkpoint's own)."""
  options = dict(teacher=teacher, mode=mode, alpha=alpha, tau=tau,
                 teacher_resolution=teacher_resolution)
  # The teacher's file is resolved once, by load_teacher (objectives.check has run
  # check_options before the factory; a hub name would be looked up twice here).
  _check_values(options)
  student = families.fields(model)
  if mode in _TOKEN_MODES and not student.get('distilled'):
    raise ValueError(f"{_key('mode')}={mode!r} trains DeiT's distillation token: set "
                     'config.model.distilled=True, or use mode logits or patient.')
  loaded = load_teacher(teacher, teacher_model, teacher_resolution,
                        student.get('dtype'))
  classes = student.get('num_classes')
  if classes and loaded.num_classes != classes:
    raise ValueError(f'{_key("teacher")}={teacher} has {loaded.num_classes} classes, the '
                     f'student {classes}: distil from a teacher trained on the same '
                     'labels.')
  logging.info('Distilling (%s) from %s: %s at %d px, %d classes.', mode, teacher,
               naming.label(loaded.model, loaded.model.model_name), loaded.resolution,
               loaded.num_classes)
  return Distill(model, loaded, mode, float(alpha), float(tau))
