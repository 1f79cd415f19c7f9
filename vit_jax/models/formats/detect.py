"""Which checkpoint format a path holds ('npz', 'timm', 'hf' or a registered one), from its name
or its bytes."""
import os
from typing import Optional

from vit_jax import fileio
from vit_jax.models.formats import files
from vit_jax.models.formats import npz
from vit_jax.models.formats import registry
from vit_jax.models.vit import hf


def detect_format(path: str, to_format: Optional[str] = None,
                  writing: bool = False) -> str:
  """The format ('npz', 'timm', 'hf', ...) of `path`, read off its name (or contents)."""
  path = os.fspath(path)
  if to_format is not None and to_format not in registry.FORMATS:
    raise ValueError(f'Unknown format {to_format!r}; use one of '
                     f'{", ".join(registry.names())}.')
  named = registry.by_suffix(path)
  if to_format is None and named is not None:
    return named
  lower = path.lower().rstrip('/')
  ext = os.path.splitext(lower)[1]
  if to_format is not None:
    if to_format == 'hf' and ext in ('.npz',) + files.STATE_EXTS:
      raise ValueError(f'{path}: the hf format is a directory (config.json + '
                       'model.safetensors); pass a directory path.')
    if to_format == 'timm' and ext not in files.STATE_EXTS:
      raise ValueError(f'{path}: a timm state dict is a .safetensors or .pth/.bin '
                       'file; name it so.')
    return to_format
  if fileio.is_remote(path):
    if ext == '.npz':
      return 'npz'
    raise ValueError(f'{path}: only .npz checkpoints are read from or written to '
                     'remote storage; copy the file locally.')
  if ext == '.npz':
    return 'npz'
  if ext in files.STATE_EXTS:
    if writing:
      return 'timm'
    return _state_dict_format(path)
  if os.path.isdir(path):
    if writing or os.path.exists(os.path.join(path, 'config.json')):
      return 'hf'
    raise ValueError(f'Checkpoint {path} is a directory without config.json; pass '
                     'a transformers ViT directory or a checkpoint file.')
  if writing:
    if path.endswith('/'):
      return 'hf'
    raise ValueError(f'Cannot tell the format of {path} from its name; end it in '
                     '.npz, .safetensors or .pth, or pass --to_format=npz|timm|hf.')
  if not os.path.exists(path):
    raise FileNotFoundError(f'Checkpoint {path} does not exist; check the path.')
  kind = files.sniff(path)
  if kind == 'npz':
    return 'npz'
  if kind in ('torch', 'safetensors'):
    return _state_dict_format(path, kind)
  raise ValueError(f'Checkpoint {path} is neither .npz, .safetensors, a torch '
                   'state dict nor a transformers directory; name it by its '
                   'format.')


def _state_dict_format(path: str, kind: Optional[str] = None) -> str:
  """'hf' when a state dict file holds transformers keys, else 'timm'."""
  files.check_file(path)
  kind = kind or ('safetensors' if path.lower().endswith('.safetensors')
                  else 'torch')
  if kind == 'safetensors':
    keys = files.safetensors_keys(path)
  else:
    keys = files.read_state_dict(path).keys()
  return 'hf' if hf.looks_like_hf(keys) else 'timm'



def is_other_format(path: str) -> bool:
  """Whether `path` is a timm/transformers checkpoint rather than an .npz."""
  path = os.fspath(path)
  return not fileio.is_remote(path) and (
      os.path.isdir(path) or path.lower().endswith(files.STATE_EXTS))



def check_readable(path: str) -> None:
  """One-line error unless `path` is a checkpoint file or a transformers directory."""
  path = os.fspath(path)
  if not (is_other_format(path) and os.path.isdir(path)):
    npz.check_readable(path)
  elif not os.path.exists(os.path.join(path, 'config.json')):
    raise ValueError(f'Checkpoint {path} is a directory without config.json: pass a '
                     'checkpoint file (.npz, .safetensors, .pth) or a transformers '
                     'model directory.')
  elif any(os.path.exists(os.path.join(path, f)) for f in ('params.npz', 'checkpoints')):
    # A vit_jax work directory also holds a config.json, of another kind.
    raise ValueError(f'Checkpoint {path} is a vit_jax work directory, not a '
                     f'transformers model directory: pass {path}/params.npz (written when its run '
                     'finishes).')
