"""ReaL label files: the published `real.json`, one list of label ids per image.

ImageNet ReaL (Beyer et al. 2020, "Are we done with ImageNet?") relabelled the 50,000
ImageNet validation images with sets of plausible classes; `real.json` is a JSON list in
validation-file order (entry i belongs to ILSVRC2012_val_<i+1, 8 digits>.JPEG), each entry
a list of class ids, empty where the raters kept no label.

vit_jax.data.label_sets matches the entries to a split's images (by ImageNet file name,
else by position).

This module reads no TensorFlow, so the commands check a file before TensorFlow loads.
"""
import json
import re
from typing import Sequence

import numpy as np

# An ImageNet validation file name: ILSVRC2012_val_00000001.JPEG is entry 0.
IMAGENET_VAL_NAME = re.compile(r'ILSVRC2012_val_(\d{8})')
IMAGENET_VAL_SIZE = 50000


def read(path: str) -> list[list[int]]:
  """The label sets of a real.json; a missing, unreadable or malformed file is one line."""
  from etils import epath  # pylint: disable=g-import-not-at-top  (gs:// paths too)
  try:
    text = epath.Path(path).read_text()
  except (OSError, UnicodeDecodeError) as e:
    reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
    raise OSError(f'Cannot read the ReaL labels {path}: {reason}; pass the real.json '
                  'file (a JSON list of label-id lists).') from None
  try:
    labels = json.loads(text)
  except ValueError as e:
    raise ValueError(f'The ReaL labels {path} are not JSON ({" ".join(str(e).split())}); '
                     'pass the real.json file (a JSON list of label-id lists).') from None
  check(labels, path)
  return labels


def check(labels, path: str) -> None:
  """One-line error unless `labels` is a non-empty list of lists of class ids >= 0."""
  if not isinstance(labels, list) or not labels:
    raise ValueError(f'The ReaL labels {path} are not a non-empty JSON list of label-id '
                     'lists (one per image).')
  for i, entry in enumerate(labels):
    if not isinstance(entry, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in entry):
      raise ValueError(f'The ReaL labels {path}: entry {i} is {entry!r}, not a list of '
                       'class ids >= 0.')


def check_classes(labels: Sequence[Sequence[int]], path: str, num_classes: int) -> None:
  """One-line error when a label id is not a class of the dataset (ids 0..num_classes-1)."""
  top = max((max(entry) for entry in labels if entry), default=-1)
  if top >= num_classes:
    raise ValueError(f'The ReaL labels {path} name class {top}, but the dataset has '
                     f'{num_classes} classes: pass the labels of this dataset.')


def padded(labels: Sequence[Sequence[int]]) -> np.ndarray:
  """The label sets as an int64 matrix [N, longest (at least 1)], padded with -1."""
  width = max(1, max(len(entry) for entry in labels))
  out = np.full((len(labels), width), -1, np.int64)
  for i, entry in enumerate(labels):
    out[i, :len(entry)] = entry
  return out


def check_length(labels: Sequence, path: str, what: str, size: int) -> None:
  """One-line error when a position-matched file does not have one entry per image."""
  if len(labels) != size:
    raise ValueError(f'The ReaL labels {path} have {len(labels)} entries but {what} has '
                     f'{size} images: pass the real.json of that split (one entry per '
                     'image, in file order).')
