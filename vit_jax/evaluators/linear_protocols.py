r"""Streaming linear evaluation as the DINO and MAE papers run it, on frozen features.

Each step reads a batch of training images through the protocol's augmentation
(features.augmented_batches: an endless, seeded, shuffled stream), computes their frozen
features on the devices (features.FeatureExtractor.last_blocks_fn, jitted, no gradient
into the backbone) and updates only linear heads: the features are never all in memory.
The heads' training takes any iterator of (features, labels, mask) batches
(`train_heads`), so features computed on the fly and an in-memory array fed in the same
order train the same heads.

The protocols (`PROTOCOLS`, every default declared there once):
  dino  Caron et al. 2021, eval_linear.py: the class tokens of the last 4 blocks (ViT-S;
        ViT-B: n_last_blocks=1, avgpool=True adds the mean of the patch tokens), each
        block's output through the final LayerNorm; head N(0, 0.01) weights, zero bias;
        SGD momentum 0.9, no weight decay, lr = base_lr * batch / 256, cosine to 0 stepped
        per epoch, 100 epochs, batch 1024; RandomResizedCrop + flip; eval resize 256 /
        centre crop 224. The lr sweep trains one head per base lr on the same features
        (as DINO's later code does; its single default, 1e-3, is among them), all from
        the same initial draw, and reports each and the best.
  mae   He et al. 2022, main_linprobe.py: the class token after the final norm;
        BatchNorm without affine (eps 1e-6; batch statistics in training, running ones,
        momentum 0.1, at evaluation) before the head; head trunc-normal(0.01) weights;
        LARS (optax's trust ratio, coefficient 0.001, no weight decay, no adaptation of
        biases) with momentum 0.9, the lr scaling the momentum buffer as MAE's PyTorch
        LARS does (optax.lars scales before it); base lr 0.1, lr =
        base_lr * batch / 256, 10 warm-up epochs then cosine per step, 90 epochs, batch
        16384; RandomResizedCrop + flip.
Both scale down with the options of `config.evals.<name>` (batch, epochs, base_lrs, ...;
None keeps the protocol's). Epochs count examples: step s has seen s * batch / N of
the N training examples. The best base lr is picked on the test split, as both papers'
code reports it; every lr's accuracy is logged beside it. As the other probes, every
process reads the whole stream (the same, seeded) and each device takes its slice.
Under LARS a head moves by about lr * 0.001 of its norm per step, so a scaled-down run
(far fewer steps than MAE's ~7,000) needs larger base lrs than 0.1.

Metrics: `<name>/<dataset>_top1` (the best head) and `<name>/<dataset>_top1_lr<base lr>`.
"""
from collections.abc import Iterable, Iterator, Mapping
import dataclasses
import math
from typing import Any, Callable, Optional

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from vit_jax.evaluators import base
from vit_jax.evaluators import features

# The streaming protocols; 'lbfgs' (vit_jax.evaluators.linear_probe) is the in-memory one.
PROTOCOL_NAMES = ('lbfgs', 'dino', 'mae')
DEFAULT_PROTOCOL = 'lbfgs'
_COMMON = {
    'momentum': 0.9,
    'weight_decay': 0.0,
    'trust_coefficient': 0.001,     # LARS only
    'head_std': 0.01,
    'min_area': 0.08,               # RandomResizedCrop's scale=(0.08, 1)
    'flip': True,
    'augment': True,                # False: the training stream takes the eval pp
    'eval_resize_ratio': 256 / 224,  # resize to crop * ratio, then the centre crop
    'shuffle_buffer': 10_000,
}
PROTOCOLS: dict[str, dict[str, Any]] = {
    'dino': {**_COMMON, 'batch': 1024, 'epochs': 100, 'warmup_epochs': 0,
             'schedule': 'epoch',
             'base_lrs': (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1),
             'optimizer': 'sgd', 'n_last_blocks': 4, 'avgpool': False,
             'batchnorm': False, 'head_init': 'normal'},
    'mae': {**_COMMON, 'batch': 16384, 'epochs': 90, 'warmup_epochs': 10,
            'schedule': 'step', 'base_lrs': (0.1,), 'optimizer': 'lars',
            'n_last_blocks': 1, 'avgpool': False, 'batchnorm': True,
            'head_init': 'trunc_normal'},
}
OPTIMIZERS = ('sgd', 'lars')
SCHEDULES = ('epoch', 'step')
HEAD_INITS = ('normal', 'trunc_normal')
BN_EPSILON = 1e-6   # MAE's BatchNorm1d(affine=False, eps=1e-6)
BN_MOMENTUM = 0.1   # PyTorch's running-statistics momentum

FeatureBatches = Iterable[tuple[Any, Any, Any]]


@dataclasses.dataclass(frozen=True)
class Settings:
  """One protocol's resolved options."""
  protocol: str
  batch: int
  epochs: float
  warmup_epochs: float
  schedule: str
  base_lrs: tuple[float, ...]
  optimizer: str
  momentum: float
  weight_decay: float
  trust_coefficient: float
  n_last_blocks: int
  avgpool: bool
  batchnorm: bool
  head_init: str
  head_std: float
  min_area: float
  flip: bool
  augment: bool
  eval_resize_ratio: float
  shuffle_buffer: int
  seed: int = 0

  def learning_rates(self) -> np.ndarray:
    """Each head's peak lr: base lr * batch / 256 (the linear scaling rule)."""
    return np.asarray(self.base_lrs, np.float32) * self.batch / 256


def protocol_of(options: Mapping[str, Any]) -> str:
  """The options' protocol name (default 'lbfgs')."""
  return options.get('protocol', DEFAULT_PROTOCOL) or DEFAULT_PROTOCOL


def _number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def resolve(name: str, options: Mapping[str, Any]) -> Settings:
  """The settings of config.evals.<name> (None keeps the protocol's), or a one-line error."""
  protocol = protocol_of(options)
  if protocol not in PROTOCOLS:
    raise ValueError(f'config.evals.{name}.protocol={protocol!r}: use one of '
                     f'{", ".join(PROTOCOL_NAMES)}.')
  values = {}
  for key, default in PROTOCOLS[protocol].items():
    value = options.get(key, None)
    values[key] = default if value is None else value
  key = lambda k: f'config.evals.{name}.{k}={values[k]!r}'  # noqa: E731
  lrs = values['base_lrs']
  if (isinstance(lrs, (str, bytes)) or not isinstance(lrs, (tuple, list)) or not lrs
      or not all(_number(v) and v > 0 for v in lrs)):
    raise ValueError(f'{key("base_lrs")}: use a list of learning rates > 0, e.g. '
                     '(1e-3, 1e-2).')
  values['base_lrs'] = tuple(float(v) for v in lrs)
  for k in ('batch', 'n_last_blocks', 'shuffle_buffer'):
    if not isinstance(values[k], int) or isinstance(values[k], bool) or values[k] < 1:
      raise ValueError(f'{key(k)}: use an integer >= 1.')
  if not _number(values['epochs']) or values['epochs'] <= 0:
    raise ValueError(f'{key("epochs")}: use a number > 0.')
  if not _number(values['warmup_epochs']) or not (
      0 <= values['warmup_epochs'] < values['epochs']):
    raise ValueError(f'{key("warmup_epochs")}: use a number in [0, epochs='
                     f'{values["epochs"]}).')
  for k, allowed in (('schedule', SCHEDULES), ('optimizer', OPTIMIZERS),
                     ('head_init', HEAD_INITS)):
    if values[k] not in allowed:
      raise ValueError(f'{key(k)}: use one of {", ".join(allowed)}.')
  if not _number(values['momentum']) or not 0 <= values['momentum'] < 1:
    raise ValueError(f'{key("momentum")}: use a number in [0, 1).')
  for k in ('weight_decay', 'trust_coefficient'):
    if not _number(values[k]) or values[k] < 0:
      raise ValueError(f'{key(k)}: use a number >= 0.')
  if not _number(values['head_std']) or values['head_std'] <= 0:
    raise ValueError(f'{key("head_std")}: use a number > 0 (the papers: 0.01).')
  if not _number(values['min_area']) or not 0 < values['min_area'] <= 1:
    raise ValueError(f'{key("min_area")}: use a number in (0, 1].')
  if not _number(values['eval_resize_ratio']) or values['eval_resize_ratio'] < 1:
    raise ValueError(f'{key("eval_resize_ratio")}: use a number >= 1 (256 / 224).')
  for k in ('avgpool', 'batchnorm', 'flip', 'augment'):
    if not isinstance(values[k], bool):
      raise ValueError(f'{key(k)}: use True or False.')
  seed = options.get('seed', 0)
  if not isinstance(seed, int) or isinstance(seed, bool):
    raise ValueError(f'config.evals.{name}.seed={seed!r}: use an integer.')
  return Settings(protocol=protocol, seed=seed, **values)


# ----------------------------------------------------------------------------
# The heads: one linear layer per base lr, trained at once on the same features.


def lr_factor(settings: Settings, num_examples: int) -> Callable[[jax.Array], jax.Array]:
  """step -> the schedule's factor of the peak lr (warm-up, then cosine to 0)."""
  warm, epochs = float(settings.warmup_epochs), float(settings.epochs)
  per_step = settings.batch / num_examples

  def factor(step):
    epoch = jnp.asarray(step, jnp.float32) * per_step
    if settings.schedule == 'epoch':  # DINO steps its CosineAnnealingLR once per epoch
      epoch = jnp.floor(epoch)
    cosine = 0.5 * (1 + jnp.cos(jnp.pi * (epoch - warm) / (epochs - warm)))
    ramp = epoch / warm if warm else jnp.ones_like(epoch)
    return jnp.clip(jnp.where(epoch < warm, ramp, cosine), 0.0, 1.0)
  return factor


def total_steps(settings: Settings, num_examples: int) -> int:
  """Steps of `batch` examples that make `epochs` passes over num_examples."""
  return max(1, math.ceil(settings.epochs * num_examples / settings.batch))


def _decay_mask(params):
  return jax.tree.map(lambda p: p.ndim > 1, params)


def direction(settings: Settings) -> optax.GradientTransformation:
  """The per-head update before -lr: SGD's or LARS's momentum trace (PyTorch's order)."""
  if settings.optimizer == 'lars':
    # MAE's LARS: weight decay and the trust ratio on matrices only, then momentum.
    return optax.chain(
        optax.add_decayed_weights(settings.weight_decay, mask=_decay_mask),
        optax.masked(optax.scale_by_trust_ratio(
            trust_coefficient=settings.trust_coefficient), _decay_mask),
        optax.trace(settings.momentum))
  return optax.chain(optax.add_decayed_weights(settings.weight_decay),
                     optax.trace(settings.momentum))


def init_heads(settings: Settings, dim: int, num_classes: int) -> dict[str, Any]:
  """Head state: params {kernel [L, D, C], bias [L, C]}, optimizer, BN statistics, step."""
  heads = len(settings.base_lrs)
  key = jax.random.PRNGKey(settings.seed)
  if settings.head_init == 'normal':
    kernel = jax.random.normal(key, (dim, num_classes))
  else:  # timm's trunc_normal_(std=s) cuts at +-2 absolute, i.e. +-2/s deviations
    bound = 2.0 / settings.head_std
    kernel = jax.random.truncated_normal(key, -bound, bound, (dim, num_classes))
  # Every head starts from the same draw: the sweep's heads differ by their lr alone.
  kernel = jnp.broadcast_to(kernel * settings.head_std, (heads, dim, num_classes))
  params = {'kernel': kernel.astype(jnp.float32),
            'bias': jnp.zeros((heads, num_classes), jnp.float32)}
  return {'params': params,
          'opt': jax.vmap(direction(settings).init)(params),
          'bn': {'mean': jnp.zeros((dim,), jnp.float32),
                 'var': jnp.ones((dim,), jnp.float32)},
          'step': jnp.zeros((), jnp.int32)}


def batch_norm(x: jax.Array, mask: jax.Array, stats: Mapping[str, jax.Array],
               train: bool) -> tuple[jax.Array, dict[str, jax.Array]]:
  """BatchNorm without affine: (normalised x, updated running statistics).

  Training normalises with the (masked) batch's mean and biased variance and moves
  the running statistics (unbiased variance) by BN_MOMENTUM; evaluation uses them.
  """
  if not train:
    return (x - stats['mean']) * jax.lax.rsqrt(stats['var'] + BN_EPSILON), dict(stats)
  w = mask[:, None]
  n = jnp.maximum(jnp.sum(mask), 1.0)
  mean = jnp.sum(x * w, axis=0) / n
  var = jnp.sum(jnp.square(x - mean) * w, axis=0) / n
  unbiased = var * n / jnp.maximum(n - 1, 1.0)
  new = {'mean': (1 - BN_MOMENTUM) * stats['mean'] + BN_MOMENTUM * mean,
         'var': (1 - BN_MOMENTUM) * stats['var'] + BN_MOMENTUM * unbiased}
  return (x - mean) * jax.lax.rsqrt(var + BN_EPSILON), new


def _train_step_fn(settings: Settings, num_examples: int, num_classes: int):
  """The jitted step (state, features, labels, mask) -> (state, loss per head [L])."""
  opt = direction(settings)
  factor = lr_factor(settings, num_examples)
  lrs = jnp.asarray(settings.learning_rates())

  def loss_fn(params, x, targets, mask):
    logits = x @ params['kernel'] + params['bias']
    xent = optax.softmax_cross_entropy(logits, targets)
    return jnp.sum(xent * mask) / jnp.maximum(jnp.sum(mask), 1.0)

  def step(state, x, labels, mask):
    x = x.astype(jnp.float32)
    mask = mask.astype(jnp.float32)
    bn = state['bn']
    if settings.batchnorm:
      x, bn = batch_norm(x, mask, bn, train=True)
    targets = jax.nn.one_hot(labels, num_classes)
    loss, grads = jax.vmap(jax.value_and_grad(loss_fn), in_axes=(0, None, None, None))(
        state['params'], x, targets, mask)
    updates, opt_state = jax.vmap(opt.update)(grads, state['opt'], state['params'])
    scale = -lrs * factor(state['step'])
    updates = jax.tree.map(
        lambda u: u * scale.reshape((-1,) + (1,) * (u.ndim - 1)), updates)
    params = optax.apply_updates(state['params'], updates)
    return {'params': params, 'opt': opt_state, 'bn': bn,
            'step': state['step'] + 1}, loss

  return jax.jit(step, donate_argnums=0)


def train_heads(batches: FeatureBatches, settings: Settings, dim: int, num_classes: int,
                num_examples: int, steps: Optional[int] = None,
                sharding: Optional[jax.sharding.Sharding] = None) -> dict[str, Any]:
  """Heads trained on `steps` (features [B, D], labels [B], mask [B]) batches, in order.

  `num_examples` (the training split's size) turns epochs into steps; `steps`
  defaults to total_steps. `sharding` places the heads (replicated over a mesh).
  """
  steps = total_steps(settings, num_examples) if steps is None else steps
  state = init_heads(settings, dim, num_classes)
  if sharding is not None:
    state = jax.device_put(state, sharding)
  step = _train_step_fn(settings, num_examples, num_classes)
  iterator = iter(batches)
  log_every = max(1, steps // 10)
  for i in range(steps):
    try:
      x, labels, mask = next(iterator)
    except StopIteration:
      raise ValueError(f'The feature batches ended after {i} of {steps} steps.') from None
    state, loss = step(state, x, labels, mask)
    if (i + 1) % log_every == 0 or i + 1 == steps:
      logging.info('linear %s: step %d/%d, loss per lr %s', settings.protocol, i + 1,
                   steps, np.round(_local(loss), 4).tolist())
  return state


@jax.jit
def _correct(state: Mapping[str, Any], x: jax.Array, labels: jax.Array,
             mask: jax.Array, batchnorm: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(correct predictions [L] of each head, examples) of one masked batch."""
  x = x.astype(jnp.float32)
  normed, _ = batch_norm(x, mask, state['bn'], train=False)
  x = jnp.where(batchnorm, normed, x)
  logits = jnp.einsum('bd,ldc->lbc', x, state['params']['kernel'])
  logits = logits + state['params']['bias'][:, None]
  hits = (jnp.argmax(logits, axis=-1) == labels[None]).astype(jnp.float32)
  mask = mask.astype(jnp.float32)
  return jnp.sum(hits * mask[None], axis=1), jnp.sum(mask)


def head_accuracies(state: Mapping[str, Any], batches: FeatureBatches,
                    settings: Settings) -> np.ndarray:
  """Top-1 accuracy [L] of each head on masked (features, labels, mask) batches."""
  correct, total = 0.0, 0.0
  for x, labels, mask in batches:
    hits, count = _correct(state, x, labels, mask, jnp.asarray(settings.batchnorm))
    correct, total = correct + hits, total + count
  total = float(_local(total)) if total else 0.0
  if not total:
    raise ValueError('linear probe: the test split has no examples.')
  return _local(correct).astype(np.float64) / total


def _local(x: Any) -> np.ndarray:
  """A replicated result on this process (a multi-host array is not fully addressable)."""
  return np.asarray(x.addressable_data(0) if isinstance(x, jax.Array) else x)


def array_batches(x: np.ndarray, labels: np.ndarray, rows: Iterable[np.ndarray],
                  batch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """In-memory (features, labels, mask) batches of the given rows, padded to `batch`."""
  for index in rows:
    index = np.asarray(index)
    n = len(index)
    pad = batch - n
    mask = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
    feats = np.concatenate([x[index], np.zeros((pad,) + x.shape[1:], x.dtype)])
    ys = np.concatenate([labels[index], np.zeros(pad, labels.dtype)])
    yield feats, ys, mask


# ----------------------------------------------------------------------------
# Streaming: images -> frozen features on the devices -> heads.


def protocol_pp(pp: ml_collections.ConfigDict,
                settings: Settings) -> ml_collections.ConfigDict:
  """The run's pp with the protocol's train (inception crop + flip) and eval recipes."""
  out = ml_collections.ConfigDict(pp.to_dict())
  crop = int(out.crop)
  out.resize = max(crop, round(crop * settings.eval_resize_ratio))
  out.train = (f'inception_crop({crop}, {float(settings.min_area)!r})'
               + ('|flip_lr' if settings.flip else ''))
  # The shorter side to `resize`, as torchvision's Resize(256) does, then the centre.
  out.eval = f'resize({out.resize}, True)|central_crop({crop})'
  out.num_channels = out.get('num_channels', 3)
  return out


def stream_features(extractor: features.FeatureExtractor, feature_fn: Callable,
                    params: Mapping[str, Any], image_batches: Iterable[tuple],
                    batch: int) -> Iterator[tuple[jax.Array, jax.Array, jax.Array]]:
  """(features, labels, mask) of image batches, computed on the devices batch by batch."""
  for images, labels, *_ in image_batches:
    n = len(images)
    mask = np.ones(n, np.float32)
    yield (feature_fn(params, extractor.shard(images, batch)),
           extractor.shard(np.asarray(labels, np.int32), batch),
           extractor.shard(mask, batch))


class StreamingLinear:
  """One dataset's streaming linear evaluation under a protocol, on one model and mesh."""

  def __init__(self, name: str, settings: Settings, context: base.Context,
               extractor: features.FeatureExtractor, pp: ml_collections.ConfigDict):
    self.name = name
    self.settings = settings
    self.extractor = extractor
    self.pp = protocol_pp(pp, settings)
    devices = context.mesh.devices.size
    if settings.batch % devices:
      raise ValueError(f'config.evals.{name}.batch={settings.batch}: use a multiple of '
                       f'the {devices} devices of the mesh.')
    try:
      self.feature_fn = extractor.last_blocks_fn(settings.n_last_blocks, settings.avgpool)
    except ValueError as e:
      raise ValueError(f'config.evals.{name}: {e}') from None
    self.replicated = jax.sharding.NamedSharding(context.mesh, jax.sharding.PartitionSpec())

  def train_stream(self, params: Mapping[str, Any],
                   data: features.Dataset) -> Iterator[tuple]:
    """The endless (features, labels, mask) stream of the training split."""
    s = self.settings
    images = features.augmented_batches(data, data.train_split, self.pp, s.batch, s.seed,
                                        s.shuffle_buffer, train=s.augment)
    return stream_features(self.extractor, self.feature_fn, params, images, s.batch)

  def run(self, params: Mapping[str, Any], data: features.Dataset,
          entry: str) -> dict[str, float]:
    """`<name>/<dataset>_top1` (best lr) and `_top1_lr<lr>` of one dataset."""
    s = self.settings
    num_examples = len(data.train_labels)
    stream = self.train_stream(params, data)
    first = next(stream)
    dim = int(first[0].shape[-1])

    def batches():
      yield first
      yield from stream
    steps = total_steps(s, num_examples)
    logging.info('linear %s on %s: %d steps of %d, features of width %d', s.protocol,
                 entry, steps, s.batch, dim)
    state = train_heads(batches(), s, dim, data.num_classes, num_examples, steps,
                        self.replicated)
    size = self.extractor.batch_size
    test = stream_features(
        self.extractor, self.feature_fn, params,
        features.image_batches(data, data.test_split, None, self.pp, size), size)
    accs = head_accuracies(state, test, s)
    key = f'{self.name}/{features.dataset_key(entry)}'
    metrics = {f'{key}_top1_lr{lr:g}': float(a) for lr, a in zip(s.base_lrs, accs)}
    metrics[f'{key}_top1'] = float(np.max(accs))
    logging.info('linear %s %s: accuracy per base lr %s', s.protocol, entry,
                 dict(zip(s.base_lrs, np.round(accs, 4).tolist())))
    return metrics

