"""Checkpoint files: .safetensors / .pth / .bin state dicts and transformers directories.

Reads tensors as float32 numpy (safetensors without torch; torch files only
through `torch.load(weights_only=True)`) and writes files atomically. Knows
nothing of what the tensors mean (the format modules do).
"""
import io
import json
import os
import pickle
import shutil
import tempfile
from typing import Mapping, Optional
import zipfile

import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

from vit_jax import errors
from vit_jax import fileio

TORCH_EXTS = ('.pth', '.bin', '.pt')
STATE_EXTS = ('.safetensors',) + TORCH_EXTS
HF_WEIGHTS = ('model.safetensors', 'model.safetensors.index.json',
              'pytorch_model.bin', 'pytorch_model.bin.index.json')
# Keys of a .pth that wrap the state dict (timm and torchvision training scripts).
_WRAPPERS = ('state_dict', 'model', 'state_dict_ema', 'model_ema')


def sniff(path: str) -> Optional[str]:
  """'npz', 'torch' or 'safetensors' from a file's first bytes, else None."""
  with open(path, 'rb') as f:
    head = f.read(16)
  if head.startswith(b'PK\x03\x04'):
    try:
      with zipfile.ZipFile(path) as z:
        names = z.namelist()
    except Exception:  # pylint: disable=broad-except
      return None
    if any(n.endswith('data.pkl') for n in names):
      return 'torch'
    return 'npz'
  if len(head) >= 9 and head[8:9] == b'{':
    return 'safetensors'
  return None



def check_file(path: str) -> None:
  """One-line error unless `path` is an existing, non-empty file."""
  if not os.path.exists(path):
    raise FileNotFoundError(f'Checkpoint {path} does not exist; check the path.')
  if os.path.isdir(path):
    raise IsADirectoryError(f'Checkpoint {path} is a directory; pass the file.')
  if os.path.getsize(path) == 0:
    raise ValueError(f'Checkpoint {path} is empty (0 bytes); download or write '
                     'it again.')



def safetensors_keys(path: str) -> list[str]:
  """The tensor names of a .safetensors file (its header checked, no data read)."""
  try:
    with safetensors.safe_open(path, 'np') as f:
      return list(f.keys())
  except Exception as e:  # pylint: disable=broad-except  # SafetensorError is no public class
    raise ValueError(f'Checkpoint {path} is truncated or not a safetensors file '
                     f'({errors.first_line(e, None)}); download or write it again.') from None


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
  """Every tensor of a .safetensors file as numpy (bfloat16 via ml_dtypes), no torch."""
  check_file(path)
  safetensors_keys(path)  # validates the header and the file length
  try:
    return dict(safetensors.numpy.load_file(path))
  except TypeError:
    # numpy has no bfloat16: decode those tensors with ml_dtypes.
    return _read_safetensors_raw(path)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f'Checkpoint {path} is truncated or corrupt '
                     f'({errors.first_line(e, None)}); download or write it again.') from None


def _read_safetensors_raw(path: str) -> dict[str, np.ndarray]:
  dtypes = {'F64': np.float64, 'F32': np.float32, 'F16': np.float16,
            'BF16': ml_dtypes.bfloat16, 'I64': np.int64, 'I32': np.int32,
            'I16': np.int16, 'I8': np.int8, 'U8': np.uint8, 'BOOL': np.bool_}
  with open(path, 'rb') as f:
    size = int.from_bytes(f.read(8), 'little')
    header = json.loads(f.read(size))
    data = f.read()
  out = {}
  for key, info in header.items():
    if key == '__metadata__':
      continue
    if info['dtype'] not in dtypes:
      raise ValueError(f'Checkpoint {path} key {key!r} has dtype {info["dtype"]}, '
                       'which vit_jax cannot read.')
    start, end = info['data_offsets']
    array = np.frombuffer(data[start:end], dtypes[info['dtype']])
    out[key] = array.reshape(info['shape'])
  return out


class MissingDependencyError(ImportError, ValueError):
  """An optional package a format needs is not installed (a ValueError too, so
  commands that report bad input in one line report this the same way)."""


def _torch():
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise MissingDependencyError('Reading or writing .pth/.bin checkpoints needs PyTorch: '
                      'pip install torch (or use .safetensors, which does not).'
                      ) from None
  return torch


def _read_torch(path: str) -> dict[str, np.ndarray]:
  """A torch state dict file via torch.load(weights_only=True) only."""
  check_file(path)
  torch = _torch()
  try:
    obj = torch.load(path, map_location='cpu', weights_only=True)
  except pickle.UnpicklingError as e:
    raise ValueError(f'Checkpoint {path} holds pickled Python objects, not just '
                     'tensors; refusing to unpickle it (torch.load(weights_only='
                     f'True): {errors.first_line(e, None)[:80]}). Save model.state_dict() '
                     'instead.') from None
  except Exception as e:  # pylint: disable=broad-except  # torch raises RuntimeError, EOFError, ...
    raise ValueError(f'Checkpoint {path} is truncated or not a torch checkpoint '
                     f'({type(e).__name__}: {errors.first_line(e, None)[:120]}); download or '
                     'write it again.') from None
  if isinstance(obj, Mapping):
    for key in _WRAPPERS:
      if key in obj and isinstance(obj[key], Mapping):
        obj = obj[key]
        break
  if not isinstance(obj, Mapping) or not obj:
    raise ValueError(f'Checkpoint {path} holds a {type(obj).__name__}, not a '
                     'state dict of named tensors.')
  out = {}
  for key, value in obj.items():
    if not isinstance(key, str) or not isinstance(value, torch.Tensor):
      raise ValueError(f'Checkpoint {path} entry {key!r} is a '
                       f'{type(value).__name__}, not a tensor; pass a state dict '
                       '(model.state_dict()).')
    value = value.detach().cpu()
    if value.is_floating_point():
      value = value.float()
    # DistributedDataParallel saves 'module.'-prefixed names.
    out[key[7:] if key.startswith('module.') else key] = value.numpy()
  return out


def read_state_dict(path: str) -> dict[str, np.ndarray]:
  """A .safetensors (no torch) or .pth/.bin (torch) state dict as numpy arrays."""
  path = os.fspath(path)
  if path.lower().endswith('.safetensors'):
    state = _read_safetensors(path)
  elif path.lower().endswith(TORCH_EXTS):
    state = _read_torch(path)
  else:
    kind = sniff(path) if os.path.isfile(path) else None
    if kind == 'safetensors':
      state = _read_safetensors(path)
    elif kind == 'torch':
      state = _read_torch(path)
    else:
      raise ValueError(f'Checkpoint {path} is no .safetensors or torch state '
                       'dict.')
  if not state:
    raise ValueError(f'Checkpoint {path} holds no tensors.')
  out = {}
  for key, value in state.items():
    floating = value.dtype.kind == 'f' or value.dtype.name == 'bfloat16'
    if not floating and value.dtype.kind not in 'biu':
      raise ValueError(f'Checkpoint {path} key {key!r} has dtype {value.dtype}, '
                       'not a numeric tensor.')
    # vit_jax parameters are float32 whatever the file stores.
    out[key] = value.astype(np.float32) if floating else value
  return out


def check_writable_file(path: str) -> None:
  """One-line error unless `path` can be written as a file."""
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'Cannot write {path}: directory {directory} does not '
                            'exist; create it first.')
  if os.path.isdir(path):
    raise IsADirectoryError(f'Cannot write {path}: it is a directory.')


def safetensors_bytes(state: Mapping[str, np.ndarray]) -> bytes:
  """A state dict as the bytes of a .safetensors file."""
  arrays = {k: np.ascontiguousarray(v) for k, v in state.items()}
  # format=pt: transformers' from_pretrained checks it.
  return safetensors.numpy.save(arrays, metadata={'format': 'pt'})


def torch_bytes(state: Mapping[str, np.ndarray]) -> bytes:
  """A state dict as the bytes of a torch.save file (needs torch)."""
  torch = _torch()
  buffer = io.BytesIO()
  torch.save({k: torch.from_numpy(np.ascontiguousarray(v))
              for k, v in state.items()}, buffer)
  return buffer.getvalue()


def read_json(path: str) -> dict:
  """A JSON object file, with a one-line error naming it when it is not one."""
  try:
    with open(path) as f:
      data = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f'{path} is not readable JSON ({errors.first_line(e, None)}).') from None
  if not isinstance(data, dict):
    raise ValueError(f'{path} is not a JSON object.')
  return data


def timm_config(directory: str) -> Optional[dict]:
  """timm's config.json in `directory` (as its hub repositories hold), else None.

  timm's names an `architecture`; a transformers config.json a `model_type` instead.
  """
  path = os.path.join(directory, 'config.json')
  if not os.path.isfile(path):
    return None
  config = read_json(path)
  return config if 'architecture' in config and 'model_type' not in config else None


def hf_weights(directory: str) -> dict[str, np.ndarray]:
  """The weights of a transformers directory (single file or sharded)."""
  for name in HF_WEIGHTS:
    path = os.path.join(directory, name)
    if not os.path.exists(path):
      continue
    if not name.endswith('.index.json'):
      return read_state_dict(path)
    index = read_json(path).get('weight_map')
    if not isinstance(index, dict):
      raise ValueError(f'{path} has no weight_map; it is not a shard index.')
    state = {}
    for shard in sorted(set(index.values())):
      if os.path.basename(shard) != shard:
        raise ValueError(f'{path} names shard {shard!r} outside its directory.')
      state.update(read_state_dict(os.path.join(directory, shard)))
    return state
  raise FileNotFoundError(f'Checkpoint {directory} has config.json but none of '
                          f'{", ".join(HF_WEIGHTS)}.')



def write_hf_dir(state, config, preprocessor, path: str) -> None:
  """Writes the directory next to `path`, then renames it into place."""
  path = os.path.abspath(path.rstrip('/'))
  parent = os.path.dirname(path)
  if not os.path.isdir(parent):
    raise FileNotFoundError(f'Cannot write {path}: directory {parent} does not '
                            'exist; create it first.')
  if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
    raise FileExistsError(f'Cannot write {path}: it exists and is not an empty '
                          'directory; remove it or pick a new path.')
  with fileio.writing(path):
    _write_dir_files(state, config, preprocessor, path, parent)


def _write_dir_files(state, config, preprocessor, path: str, parent: str) -> None:
  tmp = tempfile.mkdtemp(dir=parent, prefix='.tmp-' + os.path.basename(path))
  try:
    with open(os.path.join(tmp, 'model.safetensors'), 'wb') as f:
      f.write(safetensors_bytes(state))
    for name, data in (('config.json', config),
                       ('preprocessor_config.json', preprocessor)):
      with open(os.path.join(tmp, name), 'w') as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write('\n')
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    if os.path.isdir(path):
      os.rmdir(path)  # empty, checked above
    os.rename(tmp, path)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
