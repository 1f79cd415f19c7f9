"""How many views a multi-crop config makes of each example, without importing TensorFlow.

The benchmark and the step's FLOP count need the numbers; the views themselves are made
by vit_jax.data.multicrop (tf.data).
"""
from typing import Any


def enabled(pp: Any) -> bool:
  """Whether training examples are multi-crop views."""
  return bool(pp.get('multicrop', {}).get('global_pp', ()))


def counts(pp: Any) -> tuple[int, int, int]:
  """(global views, local views, local crop size) of each example; (1, 0, 0) when off."""
  if not enabled(pp):
    return 1, 0, 0
  m = pp.multicrop
  return len(m.global_pp), m.local_crops, m.local_crop
