"""Resuming with a changed config: which fields change the math, the check, the history.

A resumed run compares its config with the workdir's config.json. A changed field that
changes what is computed (model, data stream, batch, optimizer, schedule, seed) is
refused unless config.allow_config_change is set; then, like a change of a field that
does not (logging, evaluation and checkpoint cadence, paths, device layout), it is
logged, appended to config_history.jsonl and config.json is rewritten to the new config.
"""
import dataclasses
import datetime
import fnmatch
import json
import logging
import os
from typing import Any

from etils import epath
import ml_collections

from vit_jax import fileio
from vit_jax import rundir
from vit_jax.models import from_config

CONFIG_FILE = rundir.CONFIG_FILE
HISTORY_FILE = 'config_history.jsonl'

# The one table: dotted config keys (fnmatch patterns, first match wins) and whether a
# change of them changes the training math. Keys not listed count as math, so a knob
# added later errs on the side of asking.
FIELDS = (
    # Do not change what is computed: cadence, paths, devices, throughput knobs.
    ('log_every', False), ('checkpoint_every', False), ('keep_checkpoints', False),
    ('checkpoint_verify', False), ('allow_config_change', False),
    ('evals.*', False), ('batch_eval', False), ('peak_tflops', False),
    ('prefetch', False), ('cache', False), ('ema_eval', False),
    ('data_dir', False), ('manual_dir', False),
    # Read only when a run starts from step 0, never on resume.
    ('pretrained_path', False), ('pretrained_dir', False),
    # Same function on another device layout or kernel (float rounding aside).
    ('mesh.*', False), ('sharding', False), ('fsdp_min_size', False),
    ('model.remat', False), ('model.attention', False),
    ('model.attention_pad_multiple', False), ('model.fused_qkv', False),
    ('model.mlp_kernel', False), ('model.mlp_kernel_blocks', False),
    # Change the math: the model, the data stream, the batch, optimizer and schedule.
    ('seed', True), ('model_name', True), ('model.*', True),
    ('dataset', True), ('train_split', True), ('eval_split', True), ('pp.*', True),
    ('shuffle_buffer', True), ('data_shards', True),
    ('batch', True), ('accum_steps', True), ('total_steps', True),
    ('warmup_steps', True), ('base_lr', True), ('end_lr', True), ('decay_type', True),
    ('objective', True), ('objectives.*', True),
    ('optimizer', True), ('optimizers.*', True),
    ('weight_decay', True), ('grad_clip_norm', True), ('layer_decay', True),
    ('ema_decay', True),
)


# What a finished run's re-run says, and what the refusal of a raised total_steps repeats:
# the flags that train on, and what that changes.
TRAIN_ON = ('raise --config.total_steps and pass --config.allow_config_change=True to train '
            'on (the learning-rate schedule is then recomputed for the new total)')


def changes_math(key: str) -> bool:
  """Whether a change of the dotted config key changes the training math."""
  for pattern, math in FIELDS:
    if fnmatch.fnmatchcase(key, pattern):
      return math
  return True


@dataclasses.dataclass(frozen=True)
class Changes:
  """Fields whose value differs from the workdir's config.json: key -> (old, new)."""
  fields: dict[str, tuple[Any, Any]]

  @property
  def math(self) -> list[str]:
    """The changed keys that change the math."""
    return [k for k in self.fields if changes_math(k)]

  def describe(self, keys: list[str]) -> str:
    """'key: old -> new, ...' for the given keys."""
    return ', '.join(f'{k}: {json.dumps(self.fields[k][0])} -> '
                     f'{json.dumps(self.fields[k][1])}' for k in keys)


def _flatten(tree: Any, prefix: str = '') -> dict[str, Any]:
  if isinstance(tree, dict):
    out = {}
    for k, v in tree.items():
      out.update(_flatten(v, f'{prefix}{k}.'))
    return out
  return {prefix[:-1]: tree}


def has_checkpoints(workdir: str) -> bool:
  """Whether the workdir holds checkpoint steps, i.e. a run would resume."""
  directory = epath.Path(workdir, rundir.CHECKPOINT_DIR)
  try:
    return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())
  except OSError:
    return False


def compare(config: ml_collections.ConfigDict, workdir: str) -> Changes:
  """The fields that differ from the workdir's config.json (none if nothing to resume)."""
  path = epath.Path(workdir, CONFIG_FILE)
  if not has_checkpoints(workdir):
    return Changes({})
  try:
    old = _flatten(json.loads(path.read_text()))
  except FileNotFoundError:
    logging.warning('%s is missing, so the config cannot be compared with the one '
                    'that wrote the checkpoints.', path)
    return Changes({})
  except (ValueError, UnicodeDecodeError, OSError) as e:
    logging.warning('%s is unreadable (%s), so the config cannot be compared with the '
                    'one that wrote the checkpoints.', path, type(e).__name__)
    return Changes({})
  new = _flatten(json.loads(config.to_json_best_effort()))
  fields = {}
  for key in sorted(old):
    if key == 'allow_config_change':  # a switch of one invocation, not of the run
      continue
    if _unused_objective_option(key, old, new):
      continue
    if key not in new:
      fields[key] = (old[key], None)
    elif old[key] != new[key]:
      # Unset num_classes means "from the dataset"; config.json holds the number it
      # resolved to. Older runs wrote other "not set" markers (-1, '').
      model_key = key[len('model.'):] if key.startswith('model.') else None
      if model_key and from_config.is_unset(model_key, new[key]) and (
          model_key == 'num_classes' or from_config.is_unset(model_key, old[key])):
        continue
      fields[key] = (old[key], new[key])
  # Keys only in the new config are knobs added since that run: at their default.
  return Changes(fields)


def _unused_objective_option(key: str, old: dict, new: dict) -> bool:
  """Whether `key` is an option of an objective that neither run trains with."""
  parts = key.split('.')
  return (len(parts) > 2 and parts[0] == 'objectives' and
          parts[1] != old.get('objective') and parts[1] != new.get('objective'))


def check(config: ml_collections.ConfigDict, workdir: str) -> Changes:
  """Raises a one-line ValueError if the config changes the math of the run in workdir."""
  changes = compare(config, workdir)
  math = changes.math
  if math and not config.get('allow_config_change', False):
    if math == ['total_steps']:
      raise ValueError(
          f'{os.path.join(workdir, CONFIG_FILE)} was written for total_steps='
          f'{changes.fields["total_steps"][0]}: {TRAIN_ON}, or use a new --workdir.')
    raise ValueError(
        f'{os.path.join(workdir, CONFIG_FILE)} was written with another config, and '
        f'these fields change the training math: {changes.describe(math)}. Resume with '
        'the old values, use a new --workdir, or pass '
        '--config.allow_config_change=True to go on with the new ones (recorded in '
        f'{HISTORY_FILE}).')
  return changes


def record(config: ml_collections.ConfigDict, workdir: str, changes: Changes,
           step: int) -> None:
  """Logs the changes, appends them to config_history.jsonl, rewrites config.json."""
  if not changes.fields:
    return
  logging.warning('Resuming at step %d with a changed config: %s%s.', step,
                  changes.describe(list(changes.fields)),
                  ' (math changes allowed by allow_config_change)' if changes.math
                  else '')
  history = epath.Path(workdir, HISTORY_FILE)
  entry = {'step': step,
           'time': datetime.datetime.now(datetime.timezone.utc).isoformat(
               timespec='seconds'),
           'changes': {k: list(v) for k, v in changes.fields.items()},
           'math': changes.math}
  before = history.read_text() if history.exists() else ''
  fileio.atomic_write(str(history), (before + json.dumps(entry) + '\n').encode())
  fileio.atomic_write(os.path.join(workdir, CONFIG_FILE),
                      config.to_json_best_effort(indent=2).encode())
