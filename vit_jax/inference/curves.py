"""Training curves of a work directory: loss and accuracy against step from metrics.jsonl."""
import json
import os
import re
from typing import Optional

import numpy as np

from vit_jax.inference import figures

METRICS_FILE = 'metrics.jsonl'


def _as_workdir(path: str) -> str:
  """The work directory, also where its metrics.jsonl itself was named."""
  if os.path.basename(os.path.normpath(path)) == METRICS_FILE and os.path.isfile(path):
    return os.path.dirname(os.path.normpath(path)) or '.'
  return path


def read_records(workdir: str) -> tuple[list[dict], int]:
  """(records, skipped): WORKDIR/metrics.jsonl in file order, less a last line still being written.

  A running trainer may be caught mid-line: an unfinished last line (no newline
  yet) is skipped and counted. A finished line that is no record is damage: a
  one-line error, as are a missing directory or file.
  """
  workdir = _as_workdir(workdir)
  path = os.path.join(workdir, METRICS_FILE)
  if os.path.isfile(workdir):
    raise NotADirectoryError(f'{workdir} is a file, not a work directory; pass the '
                             f'--workdir of a training run (or its {METRICS_FILE}).')
  if not os.path.isdir(workdir):
    raise FileNotFoundError(f'Work directory {workdir} does not exist; pass the '
                            '--workdir of a training run.')
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path} does not exist: {workdir} is not the work '
                            'directory of a run that logged a step yet.')
  with open(path) as f:
    lines = f.read().split('\n')
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


def metric_order(name: str) -> list:
  """Sort key of metric names with numbers in numeric order (1shot, 5shot, 10shot, 25shot)."""
  return [int(part) if part.isdigit() else part for part in re.split(r'(\d+)', name)]


def series(records: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
  """(steps, values) of one metric; a resumed run's repeated steps keep the last value."""
  by_step = {int(r['step']): float(r[key]) for r in records
             if isinstance(r.get(key), (int, float))}
  steps = np.array(sorted(by_step), np.int64)
  return steps, np.array([by_step[s] for s in steps], np.float64)


def render_curves(records: list[dict], title: str) -> np.ndarray:
  """uint8 [H, W, 3]: losses (left, log scale) and accuracies (right) against step."""
  keys = sorted({k for r in records for k in r}, key=metric_order)
  losses = ['train_loss'] + [k for k in keys if k.startswith('loss_')]
  accuracies = [k for k in keys if k.startswith('accuracy_') or k.startswith('fewshot/')]
  fig = figures.new_figure(9, 3.6)
  left, right = fig.subplots(1, 2)
  plotted = 0
  for key in losses:
    steps, values = series(records, key)
    if len(steps):
      left.plot(steps, values, marker='.' if len(steps) < 4 else None, label=key)
      plotted += 1
  for key in accuracies:
    steps, values = series(records, key)
    if len(steps):
      right.plot(steps, values, marker='o', label=key)
      right.annotate(f'{values[-1]:.3f}', (steps[-1], values[-1]), fontsize=8,
                     textcoords='offset points', xytext=(-10, -12))
  if not plotted:
    raise ValueError(f'{title}: metrics.jsonl holds no train_loss yet; plot again '
                     'after the first logged step.')
  left.set_yscale('log')
  left.set_title('loss', fontsize=10)
  right.set_title('accuracy', fontsize=10)
  for ax in (left, right):
    ax.set_xlabel('step')
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  fig.suptitle(title, fontsize=11)
  fig.tight_layout()
  return figures.figure_pixels(fig)


def write_curves(workdir: str, out: str = '') -> tuple[str, int]:
  """Writes the curves of `workdir` to `out` (default WORKDIR/curves.png); returns (out, lines skipped)."""
  records, skipped = read_records(workdir)
  workdir = _as_workdir(workdir)
  out = out or os.path.join(workdir, 'curves.png')
  if os.path.isdir(out):
    raise IsADirectoryError(f'--out={out} is a directory; pass a .png file path.')
  if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
    raise FileNotFoundError(f'--out={out}: its directory does not exist; create it '
                            'or choose another path.')
  picture = render_curves(records, os.path.basename(os.path.abspath(workdir)))
  figures.write_png(picture, out)
  return out, skipped
