"""A run's work directory: the names of what the trainer writes there, and its metrics.

  WORKDIR/config.json            the resolved config of the run (config_history.jsonl: changes)
  WORKDIR/metrics.jsonl          one JSON record per logged step and evaluation
  WORKDIR/checkpoints/STEP/      orbax checkpoints of the train state (resume reads the newest)
  WORKDIR/params.npz             the finished run's model parameters (what predict etc. read)
  WORKDIR/ema_params.npz         the weight EMA's parameters (config.ema_decay > 0)
  WORKDIR/<objective>_params.npz what a self-supervised objective trains beside the model
                                 (mae_params.npz: the MAE decoder)

The one place these names are spelled; every stage above reads them from here.
"""
import json
import os
from typing import Optional

from etils import epath

CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.jsonl'
CHECKPOINT_DIR = 'checkpoints'
PARAMS_FILE = 'params.npz'
EMA_PARAMS_FILE = 'ema_params.npz'


def read_config(directory: str) -> Optional[dict]:
  """DIRECTORY/config.json as a dict, or None where it is absent, unreadable or no object."""
  path = os.path.join(directory, CONFIG_FILE)
  if not os.path.isfile(path):
    return None
  try:
    with open(path) as f:
      config = json.load(f)
  except (ValueError, OSError):
    return None
  return config if isinstance(config, dict) else None


def objective_params_file(objective: str) -> str:
  """The file of what objective `objective` trains beside the model, e.g. mae_params.npz."""
  return f'{objective}_{PARAMS_FILE}'


def as_workdir(path: str) -> str:
  """The work directory, also where its metrics.jsonl itself was named."""
  if os.path.basename(os.path.normpath(path)) == METRICS_FILE and epath.Path(path).is_file():
    return os.path.dirname(os.path.normpath(path)) or '.'
  return path


def read_records(workdir: str) -> tuple[list[dict], int]:
  """(records, skipped): WORKDIR/metrics.jsonl in file order, less a last line still being written.

  A running trainer may be caught mid-line: an unfinished last line (no newline
  yet) is skipped and counted. A finished line that is no record is damage: a
  one-line error, as are a missing directory or file.
  """
  workdir = as_workdir(workdir)
  path = os.path.join(workdir, METRICS_FILE)
  if epath.Path(workdir).is_file():
    raise NotADirectoryError(f'{workdir} is a file, not a work directory; pass the '
                             f'--workdir of a training run (or its {METRICS_FILE}).')
  if not epath.Path(workdir).is_dir():
    raise FileNotFoundError(f'Work directory {workdir} does not exist; pass the '
                            '--workdir of a training run.')
  if not epath.Path(path).is_file():
    raise FileNotFoundError(f'{path} does not exist: {workdir} is not the work '
                            'directory of a run that logged a step yet.')
  lines = epath.Path(path).read_text().split('\n')
  # After the last newline: '' when the file is complete, else a line in progress.
  partial = lines.pop()
  records = []
  for number, line in enumerate(lines, 1):
    if line.strip():
      record = _record(line)
      if record is None:
        raise ValueError(f'{path} line {number} is not a metrics record '
                         '({"step": N, ...}); is the file damaged?')
      records.append(record)
  if partial.strip():
    record = _record(partial)
    if record is not None:
      records.append(record)
      return records, 0
    return records, 1
  return records, 0


def _record(line: str) -> Optional[dict]:
  try:
    record = json.loads(line)
    int(record['step'])
  except (ValueError, KeyError, TypeError):
    return None
  return record


def read_metrics(workdir: str) -> list[dict]:
  """The complete records of WORKDIR/metrics.jsonl, in file order (one-line errors if unusable)."""
  return read_records(workdir)[0]
