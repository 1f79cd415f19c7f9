r"""Per-device memory of a sharded train step, from an ahead-of-time compile without arrays.

  python -m vit_jax.perf.memory --devices=1,8 --config.sharding=fsdp \
      --config.mesh.data=1 --config.mesh.fsdp=-1

simulates max(--devices) CPU devices; for each count N it builds config.mesh over the first
N devices, lowers and compiles the train step for ShapeDtypeStruct inputs (nothing of the
model's size is allocated) and prints what each device would hold. The config defaults to
the pre-training recipe (ViT-H/14, Adam, batch 4096, 224px); --config.KEY overrides it and
--hidden_size/--num_layers/--num_heads/--mlp_dim change the architecture.
"""
from collections.abc import Sequence
import dataclasses
import functools
import math
import time
from typing import Any, Callable

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import ml_collections
from ml_collections import config_flags

from vit_jax import errors
from vit_jax.configs import base
from vit_jax.configs import recipes
from vit_jax.models import from_config
from vit_jax.parallel import sharding
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import step as train_step

GiB = 2**30


def pretrain_config() -> ml_collections.ConfigDict:
  """The paper's pre-training recipe for ViT-H/14 on ImageNet-21k (Adam, batch 4096, 224px)."""
  config = base.get_base_config()
  config.model_name = recipes.model_name('h14')
  recipes.apply_pretrain(config, 'imagenet21k', config.model_name)
  config.model.num_classes = 21843  # ImageNet-21k, without reading the dataset
  return config


def build_state_and_step(config: ml_collections.ConfigDict) -> tuple[Callable, Callable]:
  """The trainer's init(rng) -> TrainState and step(state, batch) for this config."""
  model = from_config.build(config, config.model.num_classes)
  schedule = schedules.make(config)
  tx = optimizers.make(config, schedule)
  objective = objectives.make(config, model)
  size = config.pp.crop
  init = functools.partial(train_step.init_state, objective, tx,
                           image_shape=(1, size, size, 3))
  step = train_step.make_train_step(objective, tx, config.accum_steps, schedule)
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


def memory_report(config: ml_collections.ConfigDict,
                  devices: Sequence[jax.Device]) -> MemoryReport:
  """Lowers and compiles the sharded train step on `devices` without allocating arrays."""
  n = len(devices)
  if config.model.num_classes is None or config.model.num_classes < 1:
    raise ValueError(f'config.model.num_classes={config.model.num_classes}: give the '
                     'number of classes (the memory tool reads no dataset).')
  if config.batch % n:
    raise ValueError(f'config.batch={config.batch} is not divisible by {n} devices.')
  mesh = sharding.make_mesh(config.mesh, devices=devices)
  init, step = build_state_and_step(config)
  abstract = jax.eval_shape(init, jax.random.PRNGKey(config.seed))
  shardings = sharding.tree_shardings(abstract, mesh, config)
  state = jax.tree_util.tree_map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
  batch_sharding = sharding.batch_sharding(mesh)
  size = config.pp.crop
  batch = {
      'image': jax.ShapeDtypeStruct((config.batch, size, size, 3), jnp.float32,
                                    sharding=batch_sharding),
      'label': jax.ShapeDtypeStruct((config.batch, config.model.num_classes), jnp.float32,
                                    sharding=batch_sharding),
  }
  jitted = train_step.jit_train_step(step, mesh, shardings)
  start = time.perf_counter()
  compiled = jitted.lower(state, batch).compile()
  compile_s = time.perf_counter() - start
  stats = compiled.memory_analysis()
  return MemoryReport(
      devices=n, mesh=dict(mesh.shape),
      num_params=sum(x.size for x in jax.tree_util.tree_leaves(abstract.params)),
      params=_per_device_bytes(state.params),
      opt_state=_per_device_bytes(state.opt_state),
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
        f'| {r.devices} | {mesh} | {r.params / GiB:.3f} | {r.opt_state / GiB:.3f} | '
        f'{r.batch / GiB:.3f} | {r.argument / GiB:.3f} | {r.temp / GiB:.3f} | '
        f'{r.total / GiB:.3f} | {r.compile_s:.0f} |')
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
  config = ml_collections.ConfigDict(_CONFIG.value.to_dict())
  for name, flag in _ARCH.items():
    if flag.value:
      config.model[name] = flag.value
  reports = []
  for n in counts:
    report = memory_report(config, available[:n])
    size = (f'{report.num_params / 1e9:.2f}B' if report.num_params >= 1e9
            else f'{report.num_params / 1e6:.1f}M')
    print(f'{n} devices: {size} parameters, '
          f'peak {report.total / GiB:.2f} GiB per device', flush=True)
    reports.append(report)
  print(format_table(reports))


if __name__ == '__main__':
  # Its flags are defined above, at import.
  errors.run_command('vit_jax.perf.memory', lambda: None, main)
