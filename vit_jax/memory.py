"""Per-device memory of a sharded train step, from an ahead-of-time compile without arrays.

  python -m vit_jax.memory --devices=1,8 --config.sharding=fsdp \
      --config.mesh.data=1 --config.mesh.fsdp=-1

simulates max(--devices) CPU devices; for each count N it builds config.mesh over the first
N devices, lowers and compiles the train step for ShapeDtypeStruct inputs (nothing of the
model's size is allocated) and prints what each device would hold. The config defaults to
the pre-training recipe (ViT-H/14, Adam, batch 4096, 224px); --config.KEY overrides it and
--hidden_size/--num_layers/--num_heads/--mlp_dim change the architecture.
"""
from collections.abc import Sequence
import dataclasses
import math
import time
from typing import Any, Callable

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import ml_collections
from ml_collections import config_flags
import optax

from configs import common
from vit_jax import models
from vit_jax import sharding

GiB = 2**30


def pretrain_config() -> ml_collections.ConfigDict:
  """The base config with the ViT pre-training recipe (Adam, batch 4096, wd 0.1, 224px)."""
  config = common.get_base_config()
  config.model_name = 'ViT-H_14'
  config.model.num_classes = 21843
  config.pp.crop = 224
  config.batch = 4096
  config.optimizer = 'adam'
  config.base_lr = 1e-3
  config.warmup_steps = 10_000
  config.decay_type = 'linear'
  config.weight_decay = 0.1
  config.grad_clip_norm = 1.0
  config.loss = 'sigmoid_xent'
  return config


def make_model(config: ml_collections.ConfigDict, arch: dict[str, int]) -> Any:
  """The config's model with architecture overrides (width, depth, heads, mlp)."""
  kwargs = {k: v for k, v in config.model.items()
            if not (k in ('representation_size', 'dropout_rate') and v < 0)}
  kwargs['num_classes'] = config.model.num_classes
  return models.get_model(config.model_name, **kwargs, **arch)


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """The optimizer of the recipe: clipping, then Adam(W) or SGD with momentum."""
  schedule = optax.linear_schedule(0.0, config.base_lr, max(config.warmup_steps, 1))
  if config.optimizer == 'adam':
    opt = optax.adamw(schedule, b1=config.b1, b2=config.b2,
                      weight_decay=config.weight_decay,
                      mu_dtype=jnp.dtype(config.optim_dtype))
  elif config.optimizer == 'sgd':
    opt = optax.sgd(schedule, momentum=config.momentum,
                    accumulator_dtype=jnp.dtype(config.optim_dtype))
  else:
    raise ValueError(f'config.optimizer={config.optimizer!r}: use "adam" or "sgd".')
  if config.grad_clip_norm:
    opt = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), opt)
  return opt


def make_init_and_step(config: ml_collections.ConfigDict, model: Any,
                       tx: optax.GradientTransformation) -> tuple[Callable, Callable]:
  """init(rng) -> state and step(state, batch) -> (state, loss) of the training recipe."""
  size = config.pp.crop

  def init(rng):
    images = jnp.zeros((1, size, size, 3), jnp.float32)
    params = model.init(rng, images, train=False)['params']
    return {'step': jnp.zeros((), jnp.int32), 'params': params, 'opt_state': tx.init(params),
            'rng': rng}

  def step(state, batch):
    rng = jax.random.fold_in(state['rng'], state['step'])

    def loss_fn(params):
      logits = model.apply({'params': params}, batch['image'], train=True,
                           rngs={'dropout': rng})
      labels = jax.nn.one_hot(batch['label'], logits.shape[-1])
      if config.loss == 'sigmoid_xent':
        return optax.sigmoid_binary_cross_entropy(logits, labels).sum(-1).mean()
      return optax.softmax_cross_entropy(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state['params'])
    updates, opt_state = tx.update(grads, state['opt_state'], state['params'])
    params = optax.apply_updates(state['params'], updates)
    return {**state, 'step': state['step'] + 1, 'params': params,
            'opt_state': opt_state}, loss

  return init, step


def _per_device_bytes(tree: Any) -> int:
  """Bytes the most loaded device holds of a tree of sharded ShapeDtypeStructs."""
  total = 0
  for leaf in jax.tree_util.tree_leaves(tree):
    shard = leaf.sharding.shard_shape(leaf.shape)
    total += jnp.dtype(leaf.dtype).itemsize * math.prod(shard)
  return total


@dataclasses.dataclass(frozen=True)
class MemoryReport:
  """Per-device bytes of one compiled train step."""
  devices: int
  mesh: dict[str, int]
  num_params: int
  params: int           # parameters held by one device
  opt_state: int        # optimizer state held by one device
  batch: int            # input batch held by one device
  argument: int         # compiled: all inputs (state + batch)
  output: int
  alias: int            # outputs written in place of donated inputs
  temp: int             # activations, gradients and other scratch
  compile_s: float

  @property
  def total(self) -> int:
    """Live bytes at the step's peak: inputs, new outputs, scratch."""
    return self.argument + self.output - self.alias + self.temp


def memory_report(config: ml_collections.ConfigDict, devices: Sequence[jax.Device],
                  arch: dict[str, int] | None = None) -> MemoryReport:
  """Lowers and compiles the sharded train step on `devices` without allocating arrays."""
  n = len(devices)
  if config.batch % n:
    raise ValueError(f'config.batch={config.batch} is not divisible by {n} devices.')
  mesh = sharding.make_mesh(config.mesh, devices=devices)
  model = make_model(config, arch or {})
  init, step = make_init_and_step(config, model, make_optimizer(config))

  abstract = jax.eval_shape(init, jax.random.key_data(jax.random.key(0)))
  shardings = sharding.tree_shardings(abstract, mesh, config)
  state = jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
  batch_sharding = sharding.batch_sharding(mesh)
  size = config.pp.crop
  batch = {
      'image': jax.ShapeDtypeStruct((config.batch, size, size, 3), jnp.float32,
                                    sharding=batch_sharding),
      'label': jax.ShapeDtypeStruct((config.batch,), jnp.int32, sharding=batch_sharding),
  }
  jitted = jax.jit(step, in_shardings=(shardings, batch_sharding),
                   out_shardings=(shardings, None), donate_argnums=0)
  start = time.perf_counter()
  compiled = jitted.lower(state, batch).compile()
  compile_s = time.perf_counter() - start
  stats = compiled.memory_analysis()
  return MemoryReport(
      devices=n, mesh=dict(mesh.shape),
      num_params=sum(x.size for x in jax.tree_util.tree_leaves(abstract['params'])),
      params=_per_device_bytes(state['params']),
      opt_state=_per_device_bytes(state['opt_state']),
      batch=_per_device_bytes(batch),
      argument=stats.argument_size_in_bytes, output=stats.output_size_in_bytes,
      alias=stats.alias_size_in_bytes, temp=stats.temp_size_in_bytes,
      compile_s=compile_s)


def format_table(reports: Sequence[MemoryReport]) -> str:
  """Markdown table of reports, GiB per device."""
  head = ('| devices | mesh | params | opt state | batch | arguments | temp | '
          'peak est. | compile s |')
  rows = [head, '|' + '---|' * 9]
  for r in reports:
    mesh = 'x'.join(f'{k}{v}' for k, v in r.mesh.items())
    rows.append(
        f'| {r.devices} | {mesh} | {r.params / GiB:.2f} | {r.opt_state / GiB:.2f} | '
        f'{r.batch / GiB:.2f} | {r.argument / GiB:.2f} | {r.temp / GiB:.2f} | '
        f'{r.total / GiB:.2f} | {r.compile_s:.0f} |')
  return '\n'.join(rows)


_DEVICES = flags.DEFINE_list(
    'devices', ['1', '8'], 'Device counts to compile for; max(devices) CPU devices are simulated.')
_SIMULATE = flags.DEFINE_bool(
    'simulate', True, 'Simulate CPU devices; false: use the real accelerators of this host.')
_ARCH = {name: flags.DEFINE_integer(name, 0, f'Override the preset\'s {name} (0: keep).')
         for name in ('hidden_size', 'num_layers', 'num_heads', 'mlp_dim')}
_CONFIG = config_flags.DEFINE_config_dict('config', pretrain_config(),
                                          'Training config (--config.KEY=VALUE).')


def main(argv: Sequence[str]) -> None:
  """Compiles the train step for each device count and prints the memory table."""
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  try:
    counts = [int(d) for d in _DEVICES.value]
  except ValueError:
    raise app.UsageError(f'--devices={",".join(_DEVICES.value)}: use integers, e.g. 1,8') from None
  if min(counts) < 1:
    raise app.UsageError(f'--devices={",".join(_DEVICES.value)}: counts must be positive.')
  if _SIMULATE.value:
    # Must precede the first backend use; the count is read once, when the CPU client starts.
    jax.config.update('jax_platforms', 'cpu')
    jax.config.update('jax_num_cpu_devices', max(counts))
  available = jax.devices()
  if max(counts) > len(available):
    raise app.UsageError(f'--devices={max(counts)} but only {len(available)} devices exist; '
                         'use --simulate or fewer devices.')
  arch = {name: flag.value for name, flag in _ARCH.items() if flag.value}
  config = _CONFIG.value
  reports = []
  for n in counts:
    report = memory_report(config, available[:n], arch)
    print(f'{n} devices: {report.num_params / 1e9:.2f}B parameters, '
          f'peak {report.total / GiB:.2f} GiB per device', flush=True)
    reports.append(report)
  print(format_table(reports))


if __name__ == '__main__':
  app.run(main)
