"""The trainer's config check: every setting the run depends on, in one pass, up front.

Run before the work directory or anything else is created, so a mistake costs nothing:
each problem is a one-line ValueError/FileNotFoundError naming the key and what to do.
Each stage checks its own part (schedule, optimizer, objective, model, data, evaluators);
this module asks them in order.
"""
import dataclasses
import math
from typing import Any

from absl import logging
from etils import epath
import jax
import ml_collections

from vit_jax import evaluators
from vit_jax import errors
from vit_jax import fileio
from vit_jax.configs import base
from vit_jax.data import catalog
from vit_jax.data import pipeline
from vit_jax.data import sources
from vit_jax.models import formats
from vit_jax.models import from_config
from vit_jax.models import mae
from vit_jax.models import masking
from vit_jax.train import ema
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules

_POSITIVE = ('batch', 'batch_eval', 'accum_steps', 'total_steps', 'log_every',
             'keep_checkpoints', 'data_shards')


def _check_finite(config: ml_collections.ConfigDict, prefix: str = 'config') -> None:
  """Rejects NaN and Inf anywhere in the config (a learning rate of nan runs silently)."""
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      _check_finite(value, f'{prefix}.{key}')
    elif isinstance(value, float) and not math.isfinite(value):
      raise ValueError(f'{prefix}.{key}={value} must be a finite number.')


def _check_batches(config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh) -> None:
  for key in _POSITIVE:
    if not isinstance(config[key], int) or config[key] < 1:
      raise ValueError(f'config.{key}={config[key]!r} must be a positive integer.')
  for key in ('crop', 'resize'):
    if not isinstance(config.pp[key], int) or config.pp[key] < 1:
      raise ValueError(f'config.pp.{key}={config.pp[key]!r} must be a positive integer '
                       '(pixels).')
  if config.checkpoint_every < 0:
    raise ValueError(f'config.checkpoint_every={config.checkpoint_every} must be >= 0 '
                     '(0 = only at the end).')
  if config.batch % config.accum_steps:
    raise ValueError(f'config.batch={config.batch} is not divisible by '
                     f'config.accum_steps={config.accum_steps}.')
  micro = config.batch // config.accum_steps
  if micro % mesh.size:
    raise ValueError(
        f'config.batch={config.batch} / accum_steps={config.accum_steps} = '
        f'{micro} is not divisible by the {mesh.size} devices; use a batch '
        f'that is a multiple of {mesh.size * config.accum_steps}.')
  if config.batch_eval % mesh.size:
    raise ValueError(f'config.batch_eval={config.batch_eval} is not divisible '
                     f'by the {mesh.size} devices.')
  if config.batch % jax.process_count():
    raise ValueError(f'config.batch={config.batch} is not divisible by the '
                     f'{jax.process_count()} processes.')


def pretrained_file(config: ml_collections.ConfigDict) -> str:
  """The checkpoint to start from: pretrained_path, or pretrained_dir/MODEL.npz ('' = none)."""
  if config.pretrained_path:
    return config.pretrained_path
  if config.get('pretrained_dir'):
    return f'{config.pretrained_dir.rstrip("/")}/{config.model_name}.npz'
  return ''


def public_url(path: str) -> str:
  """The https address of a gs:// object (public buckets such as gs://vit_models)."""
  return 'https://storage.googleapis.com/' + path[len('gs://'):]


def check_remote_checkpoint(path: str) -> None:
  """One line naming a gs:// checkpoint that cannot be read, and how to fetch it by hand."""
  try:
    found = epath.Path(path).exists()
    reason = 'not found'
  except Exception as e:  # pylint: disable=broad-except  (no network, no credentials)
    found = False
    reason = errors.first_line(e, 160)
  if found:
    return
  how = ''
  if path.startswith('gs://'):
    how = (f' Fetch it by hand (gsutil cp {path} . or wget {public_url(path)}) and pass '
           '--config.pretrained_path=LOCAL_FILE.npz.')
  raise FileNotFoundError(f'Cannot read checkpoint {path} ({reason}).{how}')


@dataclasses.dataclass(frozen=True)
class Built:
  """What the check built on its way, for the run to use: nothing is built twice."""
  info: catalog.DatasetInfo
  model: Any
  objective: Any
  schedule: Any
  tx: Any


def validate(config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh) -> Built:
  """Checks the whole config for a run on `mesh`; returns what it built on the way (Built)."""
  _check_finite(config)
  _check_batches(config, mesh)
  if not config.peak_tflops >= 0:
    raise ValueError(f'config.peak_tflops={config.peak_tflops} must be >= 0 '
                     '(0 = measured on GPU, datasheet on TPU).')
  schedules.check(config)
  ema.check(config)
  schedule = schedules.make(config)
  tx = optimizers.make(config, schedule)  # name, options, decay, clipping
  objectives.check(config)
  # The start checkpoint before the dataset: preparing a dataset may download for
  # minutes, and an unreadable checkpoint would stop the run after that anyway.
  path = pretrained_file(config)
  if path and fileio.is_remote(path):
    check_remote_checkpoint(path)
  if path:
    formats.check_readable(path)
  info = sources.get_dataset_info(config)
  pipeline.check_train_config(config, info)
  pipeline.check_eval_config(config)
  # Preset, overrides, options; then the objective's options on that model.
  model = from_config.build(config, info.num_classes)
  objective = objectives.make(config, model)
  objectives.check_views(objective, config.pp)
  _warn_unused_objective_options(config)
  _warn_mask_rounding(config, model)
  evaluators.check(config)
  return Built(info=info, model=model, objective=objective, schedule=schedule, tx=tx)


def _warn_unused_objective_options(config: ml_collections.ConfigDict) -> None:
  """One warning per option set for an objective the run does not use (a forgotten --config.objective?)."""
  defaults = base.get_base_config().objectives
  for name, options in config.get('objectives', {}).items():
    if name == config.objective or name not in defaults:
      continue
    for key, value in options.items():
      if key not in defaults[name] or defaults[name][key] != value:
        logging.warning('config.objectives.%s.%s=%r is ignored: the run trains '
                        'objective %r (set --config.objective=%s to use it).',
                        name, key, value, config.objective, name)


def _warn_mask_rounding(config: ml_collections.ConfigDict, model: Any) -> None:
  """A warning where mask_ratio masks another share of the patches than it says."""
  options = config.get('objectives', {}).get(config.objective, {})
  ratio = options.get('mask_ratio')
  if ratio is None:
    return
  rows, cols = mae.patch_grid(model, (1, config.pp.crop, config.pp.crop, 3))
  tokens = rows * cols
  masked = tokens - masking.num_kept(tokens, ratio)
  if abs(masked / tokens - ratio) > 1e-6:
    logging.warning('config.objectives.%s.mask_ratio=%s masks %d of the %d patches '
                    'of each image (%.4g in effect).', config.objective, ratio, masked,
                    tokens, masked / tokens)
