"""The part of the trainer's config check that needs neither devices nor TensorFlow.

vit_jax.main runs it before TensorFlow loads, so a bad number, optimizer, objective option
or start checkpoint is one line in about two seconds instead of ten; validate.validate runs
it first and keeps the schedule and optimizer it built.
"""
import math
from typing import Any

from etils import epath
import ml_collections

from vit_jax import errors
from vit_jax import fileio
from vit_jax.models import formats
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


def _check_counts(config: ml_collections.ConfigDict) -> None:
  """Batch sizes, steps and image sizes are positive integers; accum_steps divides batch."""
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
  if not config.peak_tflops >= 0:
    raise ValueError(f'config.peak_tflops={config.peak_tflops} must be >= 0 '
                     '(0 = measured on GPU, datasheet on TPU).')


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


def check(config: ml_collections.ConfigDict) -> tuple[Any, Any]:
  """Checks what needs no devices and no dataset; returns the (schedule, optimizer) built."""
  _check_finite(config)
  _check_counts(config)
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
  return schedule, tx
