"""Training curves of a work directory: loss and accuracy against step from metrics.jsonl."""
import os
import re

import numpy as np

from vit_jax import rundir
from vit_jax.inference import figures

# The work directory's metrics, read by rundir (the one reader; also vit_jax.train.writers').
METRICS_FILE = rundir.METRICS_FILE
read_records = rundir.read_records
read_metrics = rundir.read_metrics


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
  workdir = rundir.as_workdir(workdir)
  out = out or os.path.join(workdir, 'curves.png')
  if os.path.isdir(out):
    raise IsADirectoryError(f'--out={out} is a directory; pass a .png file path.')
  if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
    raise FileNotFoundError(f'--out={out}: its directory does not exist; create it '
                            'or choose another path.')
  picture = render_curves(records, os.path.basename(os.path.abspath(workdir)))
  figures.write_png(picture, out)
  return out, skipped
