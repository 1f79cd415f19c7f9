"""Reading a flat state dict (timm, transformers) tensor by tensor, with one-line errors."""
from typing import Callable, Mapping, Optional

import numpy as np


class StateReader:
  """Pops keys from a state dict; errors name the file, the key and what the format says.

  `missing` ends the error for an absent key, `mismatch` (with {shape}) the one for a
  wrong shape, and `leftover(key)` the one for keys nothing consumed.
  """

  def __init__(self, state: Mapping[str, np.ndarray], source: str, *, missing: str,
               mismatch: str, leftover: Callable[[str], str]):
    self.state = dict(state)
    self.source = source
    self._missing, self._mismatch, self._leftover = missing, mismatch, leftover

  def has(self, key: str) -> bool:
    """Whether `key` is still unread."""
    return key in self.state

  def pop(self, key: str, shape: Optional[tuple] = None) -> np.ndarray:
    """Reads (and consumes) `key`, checking its shape when given."""
    if key not in self.state:
      raise ValueError(f'Checkpoint {self.source} lacks {key!r}; {self._missing}')
    value = self.state.pop(key)
    if shape is not None and tuple(value.shape) != tuple(shape):
      raise ValueError(f'Checkpoint {self.source} key {key!r} has shape '
                       f'{tuple(value.shape)}'
                       + self._mismatch.format(shape=tuple(shape)))
    return value

  def pop_optional(self, key: str, shape: tuple) -> np.ndarray:
    """A bias a library may leave out (qkv_bias=False, ...): zeros are the same map."""
    if key in self.state:
      return self.pop(key, shape)
    return np.zeros(shape, np.float32)

  def finish(self) -> None:
    """Raises if any key was left unread: the checkpoint holds what vit_jax has not."""
    if self.state:
      key = sorted(self.state)[0]
      more = f' (+{len(self.state) - 1} more)' if len(self.state) > 1 else ''
      raise ValueError(f'Checkpoint {self.source} has {key!r}{more}'
                       f'{self._leftover(key)}; it cannot be converted.')
