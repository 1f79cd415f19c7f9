"""The model card (README.md) of a Hub repository, made from a run's config.json and metrics.jsonl.

The front matter is the Hub's model-card metadata (library_name, tags, datasets, metrics,
pipeline_tag), written by huggingface_hub's ModelCardData; the body says what was trained,
its last evaluated metrics and how to load it with transformers and with vit_jax.
"""
import math
from typing import Any, Mapping, Optional, Sequence

import huggingface_hub

# The run's settings the card lists, in this order, where the config has them.
_SETTINGS = ('model_name', 'dataset', 'objective', 'total_steps', 'batch', 'optimizer',
             'base_lr', 'weight_decay', 'pp.crop', 'seed')
# Metric-name prefixes -> the Hub's metric ids (metrics.jsonl names them per split).
_METRIC_IDS = {'accuracy_': 'accuracy', 'loss_': 'loss'}


def final_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, int]]:
  """metric -> (its last finite value, the step it was logged at), for accuracy_* and loss_*."""
  out = {}
  for record in records:
    for key, value in record.items():
      if (key.startswith(tuple(_METRIC_IDS)) and isinstance(value, (int, float)) and
          math.isfinite(value)):
        out[key] = (float(value), int(record.get('step', 0)))
  return dict(sorted(out.items()))


def _setting(config: Mapping[str, Any], dotted: str) -> Any:
  value: Any = config
  for key in dotted.split('.'):
    if not isinstance(value, Mapping) or key not in value:
      return None
    value = value[key]
  return value


def card(repo_id: str, model_label: str, resolution: int, num_classes: int,
         config: Optional[Mapping[str, Any]] = None,
         records: Sequence[Mapping[str, Any]] = ()) -> str:
  """README.md of a transformers-layout repository written by vit_jax.export."""
  config = config or {}
  metrics = final_metrics(records)
  dataset = config.get('dataset')
  data = huggingface_hub.ModelCardData(
      library_name='transformers',
      pipeline_tag='image-classification' if num_classes else 'image-feature-extraction',
      tags=['vit_jax', 'jax', 'vision-transformer', 'image-classification'],
      datasets=[str(dataset)] if dataset else None,
      metrics=sorted({v for k, v in _METRIC_IDS.items() for m in metrics if m.startswith(k)})
      or None)
  head = f'{num_classes} classes' if num_classes else 'no classification head'
  origin = f'trained with vit_jax on {dataset}' if dataset else 'converted by vit_jax'
  lines = ['---', data.to_yaml(), '---', '', f'# {repo_id}', '',
           f'A {model_label} ({resolution}px input, {head}), {origin}, in transformers\' '
           'layout (config.json + model.safetensors) as `vit_jax.export` writes it.', '']
  settings = [(k, _setting(config, k)) for k in _SETTINGS]
  settings = [(k, v) for k, v in settings if v not in (None, '')]
  if settings:
    lines += ['## Training', '', '| setting | value |', '|---|---|']
    lines += [f'| {k} | {v} |' for k, v in settings] + ['']
  if metrics:
    lines += ['## Results', '', 'The last evaluation of each metric in the run\'s metrics.jsonl.',
              '', '| metric | value | step |', '|---|---|---|']
    lines += [f'| {k} | {v:.4f} | {step} |' for k, (v, step) in metrics.items()] + ['']
  auto = 'AutoModelForImageClassification' if num_classes else 'AutoModel'
  lines += ['## Use', '', '```python', f'from transformers import {auto}',
            f"model = {auto}.from_pretrained('{repo_id}')", '```', '',
            '```shell', f'python -m vit_jax.predict --checkpoint=hf-hub:{repo_id} IMAGE.jpg',
            '```', '']
  return '\n'.join(lines)
