"""The part of the trainer's config check that needs neither devices nor TensorFlow.

vit_jax.main runs it before TensorFlow loads, so a bad number, optimizer, objective option
or start checkpoint is one line in about two seconds instead of ten; validate.validate runs
it first and keeps the schedule and optimizer it built.
"""
import glob
import math
import os
import socket
from typing import Any
import zipfile

from etils import epath
import ml_collections

from vit_jax import errors
from vit_jax import fileio
from vit_jax import models
from vit_jax.data import catalog
from vit_jax.models import formats
from vit_jax.models import from_config
from vit_jax.models.formats import hub
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


# The host gs:// paths are read from; resolving it tells "offline" in milliseconds, where
# asking the file system (TensorFlow's, loaded for it) takes its import and its retries.
_GCS_HOST = 'storage.googleapis.com'


def _offline(host: str) -> bool:
  """Whether `host` cannot be resolved (no network or no DNS)."""
  try:
    socket.getaddrinfo(host, 443)
  except OSError:
    return True
  return False


def check_remote_checkpoint(path: str) -> None:
  """One line naming a gs:// checkpoint that cannot be read, and how to fetch it by hand."""
  if path.startswith('gs://') and _offline(_GCS_HOST):
    found, reason = False, f'offline: cannot resolve {_GCS_HOST}'
  else:
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


def check_npz_file(path: str) -> None:
  """A local .npz that is no zip archive (a web page, a truncated download): one line."""
  if path.endswith('.npz') and os.path.isfile(path) and not zipfile.is_zipfile(path):
    raise ValueError(f'Checkpoint {path} is not an .npz file (no zip archive: a truncated '
                     'download or an HTML page?); download it again.')


def check_model(config: ml_collections.ConfigDict) -> None:
  """The model name, its config.model options and dtype, without building the model."""
  if config.model_name not in models.MODEL_CONFIGS:
    raise ValueError(models.unknown_model(config.model_name))
  kwargs = from_config.model_kwargs(config.model_name, config.model, num_classes=1)
  if 'dtype' in kwargs:
    models.resolve_dtype(kwargs['dtype'], backend='cpu')


def _data_dir(config: ml_collections.ConfigDict) -> str:
  """TFDS's data directory for this config: config.data_dir, $TFDS_DATA_DIR or its default."""
  return (config.get('data_dir') or os.environ.get('TFDS_DATA_DIR') or
          os.path.join(os.path.expanduser('~'), 'tensorflow_datasets'))


def split_names(expression: str) -> list[str]:
  """The split names of a TFDS split expression: 'train[:800]+test' -> ['train', 'test']."""
  return [part.split('[')[0].strip() for part in expression.split('+') if part.strip()]


def check_splits(config: ml_collections.ConfigDict, spec: Any) -> None:
  """train_split and eval_split name splits of an embedded dataset (whose splits are known)."""
  if spec is None or not spec.local:
    return  # a TFDS dataset's splits are known once TFDS reads its metadata
  known = sorted({n for e in (spec.train_split, spec.eval_split) for n in split_names(e)})
  for key in ('train_split', 'eval_split'):
    unknown = [n for n in split_names(config.get(key) or '') if n not in known]
    if unknown:
      hint = errors.did_you_mean(unknown[0], known)
      raise ValueError(f'config.{key}={config[key]!r}: {config.dataset} has no split '
                       f'{unknown[0]!r}; ' + (hint or f'its splits are {", ".join(known)}.'))


def check_datasets(config: ml_collections.ConfigDict) -> None:
  """Dataset names (training and evaluations), and manually downloaded files that are missing."""
  catalog.check_name(config.dataset)
  for name, evaluation in config.get('evals', {}).items():
    # The evaluators check their own options; this only makes a misspelt name fail early.
    if (isinstance(evaluation, ml_collections.ConfigDict) and evaluation.get('dataset') and
        evaluation.get('every', 0) != -1):
      try:
        catalog.check_name(evaluation.dataset)
      except ValueError as e:
        raise ValueError(f'config.evals.{name}.dataset: {e}') from None
  spec = catalog.DATASETS.get(config.dataset)
  check_splits(config, spec)
  root = _data_dir(config)
  if spec is None or not spec.manual_files or fileio.is_remote(root):
    return
  # A prepared copy needs no archives (TFDS writes dataset_info.json when done).
  if glob.glob(os.path.join(root, spec.tfds_name.split(':')[0], '**', 'dataset_info.json'),
               recursive=True):
    return
  manual = config.get('manual_dir') or os.path.join(root, 'downloads', 'manual')
  catalog.check_manual_files(spec, config.dataset, manual, f' (not prepared in {root})')


def check(config: ml_collections.ConfigDict) -> tuple[Any, Any]:
  """Checks what needs no devices and no dataset; returns the (schedule, optimizer) built."""
  _check_finite(config)
  _check_counts(config)
  schedules.check(config)
  ema.check(config)
  schedule = schedules.make(config)
  tx = optimizers.make(config, schedule)  # name, options, decay, clipping
  objectives.check(config)
  check_model(config)
  check_datasets(config)
  # The start checkpoint before the dataset: preparing a dataset may download for
  # minutes, and an unreadable checkpoint would stop the run after that anyway.
  path = pretrained_file(config)
  if hub.is_hub_name(path):  # downloaded here (online) when the cache lacks it
    path = hub.resolve(path)
  if path and fileio.is_remote(path):
    check_remote_checkpoint(path)
  if path:
    formats.check_readable(path)
    check_npz_file(path)
  return schedule, tx
