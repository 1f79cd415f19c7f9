"""Class names for a model's outputs: the shipped ImageNet lists or a dataset's labels."""
import importlib.resources
import json
import os
import re
from typing import Optional

import ml_collections

from vit_jax.data import sources

SHIPPED_LABELS = {'imagenet1k': 1000, 'imagenet21k': 21843}


def load_label_names(labels: str, data_dir: Optional[str] = None) -> list[str]:
  """Class names of 'imagenet1k', 'imagenet21k' or a training dataset, in output order."""
  if labels in SHIPPED_LABELS:
    text = (importlib.resources.files('vit_jax') / 'labels' /
            f'{labels}.txt').read_text(encoding='utf-8')
    return [line.split('\t', 1)[-1] for line in text.splitlines() if line]
  try:
    sources.resolve(labels)
  except ValueError:
    raise ValueError(f'Unknown label set {labels!r}: use imagenet1k, imagenet21k or a '
                     'dataset name vit_jax trains on (e.g. cifar10, mnist5k, '
                     'tfds:NAME).') from None
  config = ml_collections.ConfigDict({
      'dataset': labels, 'train_split': '', 'eval_split': '', 'data_dir': data_dir,
      'manual_dir': None})
  return list(sources.get_dataset_info(config, train=False).label_names)


def default_labels(num_classes: int) -> Optional[str]:
  """The shipped label set with `num_classes` entries, if any."""
  for name, count in SHIPPED_LABELS.items():
    if count == num_classes:
      return name
  return None


def transformers_label_names(checkpoint: str, num_classes: int) -> Optional[list[str]]:
  """The `id2label` names of a transformers checkpoint's config.json, if it has real ones."""
  directory = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
  try:
    with open(os.path.join(directory, 'config.json')) as f:
      id2label = json.load(f).get('id2label')
    names = [str(id2label[str(i)]) for i in range(num_classes)]
  except (OSError, ValueError, AttributeError, KeyError, TypeError):
    return None  # no config.json, not transformers', or not one name per output
  if len(id2label) != num_classes or all(re.fullmatch(r'LABEL_\d+', n) for n in names):
    return None  # transformers' placeholders say no more than class indices
  return names
