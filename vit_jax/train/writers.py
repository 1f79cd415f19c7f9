"""Metric writers: TensorBoard events and metrics.jsonl (process 0), logs elsewhere."""
import json
import math
import os
from typing import Any, Mapping, Optional

from clu import metric_writers
from etils import epath
import jax
import numpy as np

from vit_jax import fileio
from vit_jax import rundir

METRICS_FILE = rundir.METRICS_FILE


def _to_python(value: Any) -> Any:
  value = np.asarray(value).item()
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)  # JSON has no NaN/Inf; keep them readable
  return value


class JsonlWriter(metric_writers.MetricWriter):
  """Appends one JSON object per write_scalars call: {"step": N, name: value, ...}.

  Remote filesystems (gs://) have no append: there the file is rewritten whole,
  starting from what an earlier (resumed) run left.
  """

  def __init__(self, path: str, rewrite: Optional[bool] = None):
    self._path = path
    self._lines = None
    if fileio.is_remote(path) if rewrite is None else rewrite:
      p = epath.Path(path)
      self._lines = p.read_text().splitlines() if p.exists() else []

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    record = {'step': int(step)}
    record.update({k: _to_python(v) for k, v in scalars.items()})
    line = json.dumps(record)
    if self._lines is None:
      fileio.append_whole(self._path, line + '\n')  # a full disk leaves no half line
    else:
      self._lines.append(line)
      epath.Path(self._path).write_text('\n'.join(self._lines) + '\n')

  # Only scalars go to the JSON file; the rest reach TensorBoard.
  def write_summaries(self, step, values, metadata=None): pass
  def write_images(self, step, images): pass
  def write_videos(self, step, videos): pass
  def write_audios(self, step, audios, *, sample_rate): pass
  def write_texts(self, step, texts): pass
  def write_histograms(self, step, arrays, num_buckets=None): pass
  def write_hparams(self, hparams): pass
  def flush(self): pass
  def close(self): pass


def make_writer(workdir: str,
                process_index: Optional[int] = None) -> metric_writers.MetricWriter:
  """TensorBoard + metrics.jsonl + log lines on process 0; log lines elsewhere."""
  if process_index is None:
    process_index = jax.process_index()
  if process_index != 0:
    return metric_writers.create_default_writer(just_logging=True)
  default = metric_writers.create_default_writer(workdir, asynchronous=False)
  return metric_writers.MultiWriter(
      [default, JsonlWriter(os.path.join(workdir, METRICS_FILE))])


def format_scalars(scalars: Mapping[str, Any]) -> str:
  """'name value ...' for a log line: floats to 4 decimals, the rest as plain numbers."""
  values = {k: _to_python(v) for k, v in scalars.items()}  # np.int64(5) prints as 5
  return ' '.join(f'{k} {v:.4f}' if isinstance(v, float) else f'{k} {v}'
                  for k, v in values.items())


# The one reader of metrics.jsonl (for tests, notebooks and tools), kept under this name.
read_metrics = rundir.read_metrics
