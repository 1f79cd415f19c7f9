"""Parameters in the published `.npz` layout (gs://vit_models/...): load and save.

The published checkpoints are `np.savez` archives whose keys are '/'-joined parameter
paths. Older files number the modules inside an encoder block the pre-Linen way
(`LayerNorm_0`, `MultiHeadDotProductAttention_1`, `LayerNorm_2`, `MlpBlock_3`) and store
GroupNorm scale/bias as (1, 1, 1, C); `load` turns both into the Linen tree of
`vit_jax.models`. `save` writes the published numbering (each family's `npz_renames`)
because the original vit_jax loader and timm's `_load_weights` read exactly those names.
Local and remote (gs://) paths go through etils.epath.
"""
import io
import json
import re
from typing import Any, Mapping, Optional
import zipfile
import zlib

from etils import epath
from flax import traverse_util
import numpy as np

from vit_jax import fileio
from vit_jax.models import families

Params = dict[str, Any]

_ZIP_MAGICS = (b'PK\x03\x04', b'PK\x05\x06')
_NPY_MAGIC = b'\x93NUMPY'
_NUMBERED = re.compile(r'^(.*)_(\d+)$')
_GROUPNORM = re.compile(r'^gn(\d+|_root|_proj)$')
# The model options the tree does not show (activation, LayerNorm epsilon, ...), as JSON
# bytes under a key no parameter path has: the original loader and timm's read only the
# parameters' names and pass it by.
MODEL_RECORD = '__vit_jax_model__'
# What the record may hold: JSON values of the options a format may lack.
_RECORDED = (str, int, float, bool, type(None))


def first_line(e: BaseException) -> str:
  """'ErrorType: first line of the message', for one-line errors about a file."""
  text = str(e).strip().splitlines()
  return f'{type(e).__name__}: {text[0]}' if text else type(e).__name__


def check_readable(path: str) -> None:
  """Raises a one-line error when `path` is missing or no regular file."""
  p = epath.Path(path)
  remote = ' (and your credentials for remote storage)' if fileio.is_remote(path) else ''
  if not p.exists():
    raise FileNotFoundError(f'Checkpoint {path} does not exist; check the path{remote}.')
  if p.is_dir():
    raise IsADirectoryError(f'Checkpoint {path} is a directory; pass the path of the '
                            'checkpoint file inside it.')


# ----------------------------------------------------------------------------
# Trees.


def flatten(tree: Mapping[str, Any]) -> dict[str, Any]:
  """Nested mapping -> {'a/b/c': leaf}, refusing names that cannot be stored."""
  flat = {}
  for keys, value in traverse_util.flatten_dict(dict(tree)).items():
    for key in keys:
      if not isinstance(key, str) or not key or '/' in key:
        raise ValueError(f'Parameter name {"/".join(map(str, keys))!r} has a part '
                         f"{key!r} that is not a non-empty string without '/'; cannot "
                         'store it.')
    flat['/'.join(keys)] = value
  return flat


def unflatten(flat: Mapping[str, Any], source: str) -> Params:
  """{'a/b/c': leaf} -> nested dict; `source` names the file in errors."""
  keys = sorted(flat)
  for key in keys:
    if not all(key.split('/')):
      raise ValueError(f'Checkpoint {source} has a malformed key {key!r} (empty path '
                       'component); it is not in the published layout.')
  for key, after in zip(keys, keys[1:]):
    if after.startswith(key + '/'):
      raise ValueError(f'Checkpoint {source} has both an array {key!r} and arrays '
                       f'below it ({after!r}); it is not in the published layout.')
  return traverse_util.unflatten_dict({tuple(k.split('/')): flat[k] for k in keys})


def _to_linen_names(tree: Params) -> Params:
  """Renumbers `Name_<i>` children per name, in index order, at every level.

  Pre-Linen numbered all submodules of a scope with one counter; Linen counts
  per module type. Renumbering each type's indices to 0, 1, ... maps the first
  onto the second and leaves Linen trees as they are.
  """
  groups: dict[str, list[tuple[int, str]]] = {}
  for key in tree:
    match = _NUMBERED.match(key)
    if match:
      groups.setdefault(match.group(1), []).append((int(match.group(2)), key))
  renamed = {}
  for prefix, members in groups.items():
    for new_index, (_, key) in enumerate(sorted(members)):
      renamed[key] = f'{prefix}_{new_index}'
  return {
      renamed.get(k, k): _to_linen_names(v) if isinstance(v, dict) else v
      for k, v in tree.items()
  }


def _to_published_names(flat: Mapping[str, Any]) -> dict[str, Any]:
  """Renames children of matching modules as the families' npz_renames say."""
  rules = [(re.compile(pattern), renames)
           for family in families.FAMILIES.values()
           for pattern, renames in family.npz_renames.items()]
  out = {}
  for path, value in flat.items():
    parts = path.split('/')
    for i in range(len(parts) - 2):
      for pattern, renames in rules:
        if pattern.match(parts[i]):
          parts[i + 1] = renames.get(parts[i + 1], parts[i + 1])
    out['/'.join(parts)] = value
  return out


def _fix_groupnorm(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Old hybrid files store GroupNorm scale/bias as (1, 1, 1, C): make them (C,)."""
  out = {}
  for path, value in flat.items():
    parts = path.split('/')
    if (len(parts) >= 2 and _GROUPNORM.match(parts[-2]) and
        parts[-1] in ('scale', 'bias') and value.ndim > 1 and
        all(d == 1 for d in value.shape[:-1])):
      value = value.reshape(value.shape[-1])
    out[path] = value
  return out


# ----------------------------------------------------------------------------
# Load / save.


def _check_magic(path: str, head: bytes) -> None:
  """Refuses files that are no zip archive before numpy gets to see them."""
  if any(head.startswith(m) for m in _ZIP_MAGICS):
    return
  if not head:
    raise ValueError(f'Checkpoint {path} is empty (0 bytes); download or write '
                     'it again.')
  if head.startswith(_NPY_MAGIC):
    what = 'a single .npy array'
  elif head[:1] == b'\x80':
    what = 'a pickle (it will not be unpickled)'
  else:
    what = 'not a zip archive'
  raise ValueError(f'Checkpoint {path} is {what}, not an .npz file of named '
                   'arrays; pass a file written by np.savez or '
                   'vit_jax.checkpoint.save.')


def _read_npz(path: str) -> dict[str, np.ndarray]:
  """Every array of the .npz at `path`, by key; one-line errors otherwise."""
  check_readable(path)
  arrays = {}
  key = None
  try:
    with epath.Path(path).open('rb') as f:
      _check_magic(path, f.read(8))
      f.seek(0)
      # Remote files are read whole: np.load needs random access.
      source = io.BytesIO(f.read()) if fileio.is_remote(path) else f
      with np.load(source, allow_pickle=False) as npz:
        for key in npz.files:
          arrays[key] = npz[key]
  except ValueError as e:
    if str(e).startswith(f'Checkpoint {path}'):
      raise
    if 'allow_pickle' in str(e):
      raise ValueError(f'Checkpoint {path} holds pickled Python objects in key '
                       f'{key!r}; refusing to unpickle. Re-save it with '
                       'numeric arrays only.') from None
    raise ValueError(f'Checkpoint {path} is truncated or corrupt (key {key!r}: '
                     f'{first_line(e)}); download or write it again.') from None
  except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError) as e:
    where = f'key {key!r}: ' if key is not None else ''
    raise ValueError(f'Checkpoint {path} is truncated or corrupt ({where}'
                     f'{first_line(e)}); download or write it again.') from None
  if not arrays:
    raise ValueError(f'Checkpoint {path} holds no arrays; it is not a parameter '
                     'checkpoint.')
  for key, value in arrays.items():
    if value.dtype.kind not in 'biuf':
      raise ValueError(f'Checkpoint {path} key {key!r} has dtype {value.dtype}, '
                       'not a numeric array; it is not a parameter checkpoint.')
  return arrays


def load(path: str) -> Params:
  """Reads an .npz checkpoint (local or gs://) into a Linen-named nested dict."""
  return load_with_options(path)[0]


def load_with_options(path: str) -> tuple[Params, dict[str, Any]]:
  """(params, the model options recorded beside them by `save`, {} for other files)."""
  path = str(path)
  arrays = _read_npz(path)
  record = arrays.pop(MODEL_RECORD, None)
  if not arrays:
    raise ValueError(f'Checkpoint {path} holds no arrays; it is not a parameter '
                     'checkpoint.')
  options = {}
  if record is not None:
    try:
      options = json.loads(record.astype(np.uint8).tobytes().decode())
    except (UnicodeDecodeError, ValueError) as e:
      raise ValueError(f'Checkpoint {path} has a damaged {MODEL_RECORD} record '
                       f'({first_line(e)}); write it again.') from None
    if not isinstance(options, dict):
      raise ValueError(f'Checkpoint {path} has a damaged {MODEL_RECORD} record (not an '
                       'object); write it again.')
  return _to_linen_names(unflatten(_fix_groupnorm(arrays), path)), options


def _as_numpy(path: str, value: Any) -> np.ndarray:
  try:
    array = np.asarray(value)
  except Exception as e:  # pylint: disable=broad-except
    raise TypeError(f'Parameter {path!r} cannot be turned into a numpy array '
                    f'({first_line(e)}); gather sharded arrays to the host '
                    'first (jax.device_get).') from None
  if array.dtype.kind not in 'biuf':
    # bfloat16 (ml_dtypes, kind 'V') is unreadable without ml_dtypes; float32
    # is what every reader of the published layout expects.
    if getattr(array.dtype, 'name', '') in ('bfloat16', 'float8_e4m3fn',
                                             'float8_e5m2'):
      return array.astype(np.float32)
    raise TypeError(f'Parameter {path!r} has dtype {array.dtype}; only numeric '
                    'arrays can be saved.')
  return array


def save(params: Mapping[str, Any], path: str,
         options: Optional[Mapping[str, Any]] = None) -> None:
  """Writes `params` (variables['params']) as .npz in the published layout, atomically.

  `options`: model fields the tree does not show (activation, layer_norm_epsilon, ...),
  kept in the MODEL_RECORD entry, which `load_with_options` gives back.
  """
  path = str(path)
  if not isinstance(params, Mapping) or not params:
    raise ValueError(f'save({path!r}): params must be a non-empty nested dict of '
                     f'arrays, got {type(params).__name__}.')
  if set(params) == {'params'}:
    raise ValueError(f"save({path!r}): got the variables dict; pass "
                     "variables['params'] instead.")
  flat = {k: _as_numpy(k, v) for k, v in flatten(params).items()}
  target = epath.Path(path)
  if not fileio.is_remote(path):
    if not target.parent.is_dir():
      raise FileNotFoundError(f'Cannot save checkpoint {path}: directory '
                              f'{target.parent} does not exist; create it first.')
    if target.is_dir():
      raise IsADirectoryError(f'Cannot save checkpoint {path}: it is a directory; '
                              'pass a file name ending in .npz.')
  arrays = _to_published_names(flat)
  if options:
    bad = sorted(k for k, v in options.items() if not isinstance(v, _RECORDED))
    if bad:
      raise TypeError(f'save({path!r}): option {bad[0]}={options[bad[0]]!r} is not a '
                      'string, number or bool; it cannot be recorded.')
    arrays[MODEL_RECORD] = np.frombuffer(
        json.dumps(dict(sorted(options.items()))).encode(), np.uint8)
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  fileio.atomic_write(path, buffer.getvalue())
