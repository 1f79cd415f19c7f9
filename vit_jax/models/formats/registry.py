"""The checkpoint formats by name: how each reads and writes, and the file names that are it.

A new format is one module that calls `register(Format(...))` at import; `formats.read`,
`read_params`, `write`, `convert`, `--to_format` and detection by file name then know it.
The built-in ones (npz, timm, hf) are registered in vit_jax/models/formats/__init__.py.
"""
import dataclasses
from typing import Any, Callable, Mapping, Optional

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Format:
  """One checkpoint format."""
  name: str
  # (path, model, num_heads, options) -> (params, preset name or None, the model options
  # the file records or lacks: activation, layer_norm_epsilon, ...).
  read: Callable[[str, Optional[str], Optional[int], Mapping[str, Any]],
                 tuple[Params, Optional[str], dict]]
  # (path, num_heads) -> params: only the parameters (fine-tuning reads these).
  read_params: Callable[[str, Optional[int]], Params]
  # (params, path, model options) -> None: writes the tree (atomically).
  write: Callable[[Params, str, Mapping[str, Any]], None]
  # File-name endings that are this format (lower case); the built-in formats are told
  # apart by vit_jax/models/formats/detect.py's rules instead.
  suffixes: tuple[str, ...] = ()
  # Trees the format holds beyond the backbone that --drop_head also leaves out.
  head_extras: tuple[str, ...] = ()
  # True: holds any family's tree as it is (npz). False: a conversion to another
  # library's names, written only for the families that say they speak it
  # (`Family.formats`).
  container: bool = True


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> None:
  """Adds a format (errors on a name that is taken)."""
  if fmt.name in FORMATS:
    raise ValueError(f'Checkpoint format {fmt.name!r} is already registered.')
  FORMATS[fmt.name] = fmt


def names() -> tuple[str, ...]:
  """The registered format names, in registration order."""
  return tuple(FORMATS)


def by_suffix(path: str) -> Optional[str]:
  """The registered format whose file-name ending `path` has, if any."""
  lower = path.lower().rstrip('/')
  return next((f.name for f in FORMATS.values() if f.suffixes and lower.endswith(f.suffixes)),
              None)
