"""Parameters in the published `.npz` layout: load, save, adapt for fine-tuning.

The published ViT checkpoints (gs://vit_models/...) are `np.savez` archives whose
keys are '/'-joined parameter paths. Older files number the modules inside an
encoder block the pre-Linen way (`LayerNorm_0`, `MultiHeadDotProductAttention_1`,
`LayerNorm_2`, `MlpBlock_3`) and store GroupNorm scale/bias as (1, 1, 1, C);
`load` turns both into the Linen tree of `vit_jax.models`. `save` writes the
pre-Linen numbering because the original vit_jax loader and timm's
`_load_weights` read exactly those names.
"""
from collections import abc
import io
import os
import re
import tempfile
from typing import Any, Mapping, Optional, Sequence, Union
import uuid
import zipfile
import zlib

from absl import logging
import numpy as np
import scipy.ndimage

Params = dict[str, Any]
Grid = tuple[int, int]

_ZIP_MAGICS = (b'PK\x03\x04', b'PK\x05\x06')
_NPY_MAGIC = b'\x93NUMPY'
_NUMBERED = re.compile(r'^(.*)_(\d+)$')
_ENCODER_BLOCK = re.compile(r'^encoderblock_\d+$')
_GROUPNORM = re.compile(r'^gn(\d+|_root|_proj)$')
# Linen name -> pre-Linen name of the modules inside one encoder block.
_TO_PRE_LINEN = {
    'LayerNorm_0': 'LayerNorm_0',
    'MultiHeadDotProductAttention_0': 'MultiHeadDotProductAttention_1',
    'LayerNorm_1': 'LayerNorm_2',
    'MlpBlock_0': 'MlpBlock_3',
}
_HEAD_KEYS = ('head/', 'pre_logits/')
_POSEMB = 'Transformer/posembed_input/pos_embedding'


# ----------------------------------------------------------------------------
# Paths.


def _is_remote(path: str) -> bool:
  return '://' in path


def _gfile():
  """tf.io.gfile, imported only for remote paths so TF stays optional."""
  try:
    from tensorflow.io import gfile  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'Reading or writing gs:// and other remote paths needs TensorFlow '
        '(pip install tensorflow-cpu); copy the file locally otherwise.') from e
  return gfile


def _open_read(path: str):
  if _is_remote(path):
    return _gfile().GFile(path, 'rb')
  return open(path, 'rb')


def _check_readable(path: str) -> None:
  """Raises a one-line error when `path` is missing or no regular file."""
  if _is_remote(path):
    gfile = _gfile()
    if not gfile.exists(path):
      raise FileNotFoundError(f'Checkpoint {path} does not exist; check the path '
                              '(and your credentials for remote storage).')
    if gfile.isdir(path):
      raise IsADirectoryError(f'Checkpoint {path} is a directory; pass the path '
                              'of the .npz file inside it.')
    return
  if not os.path.exists(path):
    raise FileNotFoundError(f'Checkpoint {path} does not exist; check the path.')
  if os.path.isdir(path):
    raise IsADirectoryError(f'Checkpoint {path} is a directory; pass the path of '
                            'the .npz file inside it.')


def _check_magic(path: str) -> None:
  """Refuses files that are no zip archive before numpy gets to see them."""
  with _open_read(path) as f:
    head = f.read(8)
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


def _first_line(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return f'{type(e).__name__}: {text[0]}' if text else type(e).__name__


# ----------------------------------------------------------------------------
# Trees.


def _flatten(tree: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
  """Nested mapping -> {'a/b/c': leaf}; empty sub-dicts vanish."""
  flat = {}
  for key, value in tree.items():
    if not isinstance(key, str) or not key or '/' in key:
      raise ValueError(f'Parameter name {prefix + str(key)!r} is not a '
                       "non-empty string without '/'; cannot store it.")
    path = prefix + key
    if isinstance(value, abc.Mapping):
      flat.update(_flatten(value, path + '/'))
    else:
      flat[path] = value
  return flat


def _unflatten(flat: Mapping[str, Any], source: str) -> Params:
  """{'a/b/c': leaf} -> nested dict; `source` names the file in errors."""
  tree: Params = {}
  for path in sorted(flat):
    parts = path.split('/')
    if not all(parts):
      raise ValueError(f'Checkpoint {source} has a malformed key {path!r} (empty '
                       "path component); it is not in the published layout.")
    node = tree
    for i, part in enumerate(parts[:-1]):
      node = node.setdefault(part, {})
      if not isinstance(node, dict):
        raise ValueError(f'Checkpoint {source} has both an array '
                         f'{"/".join(parts[:i + 1])!r} and arrays below it '
                         f'({path!r}); it is not in the published layout.')
    if parts[-1] in node:
      raise ValueError(f'Checkpoint {source} has both an array {path!r} and '
                       'arrays below it; it is not in the published layout.')
    node[parts[-1]] = flat[path]
  return tree


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


def _to_pre_linen_names(flat: Mapping[str, Any]) -> dict[str, Any]:
  """Renames the modules inside encoder blocks to the published numbering."""
  out = {}
  for path, value in flat.items():
    parts = path.split('/')
    for i in range(len(parts) - 1):
      if _ENCODER_BLOCK.match(parts[i]) and i + 1 < len(parts) - 1:
        parts[i + 1] = _TO_PRE_LINEN.get(parts[i + 1], parts[i + 1])
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


def _read_npz(path: str) -> dict[str, np.ndarray]:
  """Every array of the .npz at `path`, by key; one-line errors otherwise."""
  _check_readable(path)
  _check_magic(path)
  arrays = {}
  key = None
  try:
    with _open_read(path) as f:
      # Remote files are read whole: np.load needs random access.
      source = io.BytesIO(f.read()) if _is_remote(path) else f
      with np.load(source, allow_pickle=False) as npz:
        for key in npz.files:
          arrays[key] = npz[key]
  except ValueError as e:
    if 'allow_pickle' in str(e):
      raise ValueError(f'Checkpoint {path} holds pickled Python objects in key '
                       f'{key!r}; refusing to unpickle. Re-save it with '
                       'numeric arrays only.') from None
    raise ValueError(f'Checkpoint {path} is truncated or corrupt (key {key!r}: '
                     f'{_first_line(e)}); download or write it again.') from None
  except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError) as e:
    where = f'key {key!r}: ' if key is not None else ''
    raise ValueError(f'Checkpoint {path} is truncated or corrupt ({where}'
                     f'{_first_line(e)}); download or write it again.') from None
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
  flat = _fix_groupnorm(_read_npz(os.fspath(path)))
  return _to_linen_names(_unflatten(flat, path))


def _as_numpy(path: str, value: Any) -> np.ndarray:
  try:
    array = np.asarray(value)
  except Exception as e:  # pylint: disable=broad-except
    raise TypeError(f'Parameter {path!r} cannot be turned into a numpy array '
                    f'({_first_line(e)}); gather sharded arrays to the host '
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


def save(params: Mapping[str, Any], path: str) -> None:
  """Writes `params` (variables['params']) as .npz in the published layout."""
  path = os.fspath(path)
  if not isinstance(params, abc.Mapping) or not params:
    raise ValueError(f'save({path!r}): params must be a non-empty nested dict of '
                     f'arrays, got {type(params).__name__}.')
  if set(params) == {'params'}:
    raise ValueError(f"save({path!r}): got the variables dict; pass "
                     "variables['params'] instead.")
  flat = {k: _as_numpy(k, v) for k, v in _flatten(params).items()}
  flat = _to_pre_linen_names(flat)
  if _is_remote(path):
    _save_remote(flat, path)
  else:
    _save_local(flat, path)


def _save_local(flat: Mapping[str, np.ndarray], path: str) -> None:
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'Cannot save checkpoint {path}: directory '
                            f'{directory} does not exist; create it first.')
  if os.path.isdir(path):
    raise IsADirectoryError(f'Cannot save checkpoint {path}: it is a directory; '
                            'pass a file name ending in .npz.')
  fd, tmp = tempfile.mkstemp(dir=directory, prefix='.tmp-',
                             suffix='-' + os.path.basename(path))
  try:
    with os.fdopen(fd, 'wb') as f:
      np.savez(f, **flat)
      f.flush()
      os.fsync(f.fileno())
    # mkstemp creates 0600 files; give the result the usual umask mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def _save_remote(flat: Mapping[str, np.ndarray], path: str) -> None:
  gfile = _gfile()
  buffer = io.BytesIO()
  np.savez(buffer, **flat)
  tmp = f'{path}.tmp-{uuid.uuid4().hex}'
  try:
    with gfile.GFile(tmp, 'wb') as f:
      f.write(buffer.getvalue())
    gfile.rename(tmp, path, overwrite=True)
  except BaseException:
    if gfile.exists(tmp):
      gfile.remove(tmp)
    raise


# ----------------------------------------------------------------------------
# Position embeddings.


def _as_grid(value: Union[int, Sequence[int]], what: str) -> Grid:
  """Token count (must be square) or (h, w) -> (h, w)."""
  if isinstance(value, (int, np.integer)):
    side = int(round(np.sqrt(max(int(value), 0))))
    if value <= 0 or side * side != int(value):
      raise ValueError(f'Cannot interpolate position embeddings: {what} has '
                       f'{int(value)} patch tokens, not a square grid; pass the '
                       'grid as (height, width).')
    return side, side
  grid = tuple(int(v) for v in value)
  if len(grid) != 2 or min(grid) <= 0:
    raise ValueError(f'Cannot interpolate position embeddings: {what} grid '
                     f'{tuple(value)} is not (height, width) with positive '
                     'sides.')
  return grid


def interpolate_posemb(posemb: np.ndarray,
                       new_shape_or_grid: Union[int, Sequence[int]],
                       has_class_token: bool,
                       old_grid: Optional[Sequence[int]] = None) -> np.ndarray:
  """Resizes (1, N, D) position embeddings bilinearly on their 2D patch grid.

  `new_shape_or_grid` is the new token count N' (class token included when
  `has_class_token`; the rest must form a square grid), a (1, N', D) shape, or
  the new patch grid (h, w). `old_grid` gives the old grid when it is not
  square. The class token's embedding is kept as is. The resize is
  scipy.ndimage.zoom(order=1) as in the original vit_jax (grid corners stay on
  corners), so fine-tuned checkpoints reproduce its numbers.
  """
  posemb = np.asarray(posemb)
  if posemb.ndim != 3 or posemb.shape[0] != 1:
    raise ValueError(f'Position embeddings must have shape (1, tokens, width), '
                     f'got {posemb.shape}.')
  ntok = 1 if has_class_token else 0
  tok, grid_emb = posemb[:, :ntok], posemb[0, ntok:]
  if isinstance(new_shape_or_grid, (int, np.integer)):
    new_grid = _as_grid(int(new_shape_or_grid) - ntok, 'the new model')
  elif len(new_shape_or_grid) == 3:
    new_grid = _as_grid(int(new_shape_or_grid[1]) - ntok, 'the new model')
  else:
    new_grid = _as_grid(new_shape_or_grid, 'the new model')
  old = _as_grid(len(grid_emb) if old_grid is None else old_grid, 'the checkpoint')
  if old[0] * old[1] != len(grid_emb):
    raise ValueError(f'Cannot interpolate position embeddings: checkpoint grid '
                     f'{old} holds {old[0] * old[1]} tokens but the embeddings '
                     f'have {len(grid_emb)} (plus {ntok} class token).')
  if old == new_grid:
    return posemb
  logging.info('interpolate_posemb: grid %s -> %s', old, new_grid)
  grid_emb = grid_emb.reshape(old[0], old[1], -1)
  zoom = (new_grid[0] / old[0], new_grid[1] / old[1], 1)
  grid_emb = scipy.ndimage.zoom(grid_emb, zoom, order=1)
  grid_emb = grid_emb.reshape(1, new_grid[0] * new_grid[1], -1)
  return np.concatenate([tok, grid_emb], axis=1)


# ----------------------------------------------------------------------------
# Fine-tuning.


def _config_get(config: Any, key: str, default: Any = None) -> Any:
  getter = getattr(config, 'get', None)
  if getter is not None:
    return getter(key, default)
  return getattr(config, key, default)


def _summary(keys: Sequence[str], limit: int = 6) -> str:
  keys = sorted(keys)
  more = f' (+{len(keys) - limit} more)' if len(keys) > limit else ''
  return ', '.join(keys[:limit]) + more


def load_pretrained(*,
                    pretrained_path: str,
                    init_params: Mapping[str, Any],
                    model_config: Any,
                    grid: Optional[Sequence[int]] = None,
                    pretrained_grid: Optional[Sequence[int]] = None,
                    strict: bool = True) -> Params:
  """Loads a checkpoint into the tree of `init_params` for fine-tuning.

  The head comes from `init_params`; the checkpoint's `pre_logits` is dropped
  when the new model has none and kept when its width matches (else taken
  from `init_params`, as when the checkpoint lacks it). Position embeddings are
  interpolated to the new grid (`grid` for non-square new grids,
  `pretrained_grid` for non-square checkpoint grids). Other shape mismatches
  raise a one-line ValueError; with `strict`, so do parameters the checkpoint
  lacks or the model does not have (beyond head/pre_logits/cls), else they are
  logged. Returns a nested dict of numpy arrays shaped like `init_params`.
  """
  restored = _flatten(load(pretrained_path))
  init = {k: np.asarray(v) for k, v in _flatten(init_params).items()}
  name = _config_get(model_config, 'model_name', None) or 'the model'
  new_token = 'cls' in init
  old_token = 'cls' in restored

  def is_head(key: str) -> bool:
    return key.startswith(_HEAD_KEYS)

  unexpected = [k for k in restored if k not in init]
  missing = [k for k in init if k not in restored]
  # A checkpoint's class token is dropped when the new model pools without it.
  hard_unexpected = [k for k in unexpected
                     if not is_head(k) and not (k == 'cls' and not new_token)]
  hard_missing = [k for k in missing if not is_head(k)]
  if unexpected:
    logging.info('load_pretrained: dropping %d checkpoint parameters the model '
                 'does not have: %s', len(unexpected), _summary(unexpected))
  if missing:
    logging.warning('load_pretrained: %d parameters not in %s, kept from '
                    'init_params: %s', len(missing), pretrained_path,
                    _summary(missing))
  if strict and (hard_unexpected or hard_missing):
    parts = []
    if hard_missing:
      parts.append(f'lacks {len(hard_missing)} parameters of {name} '
                   f'({_summary(hard_missing)})')
    if hard_unexpected:
      parts.append(f'has {len(hard_unexpected)} parameters {name} does not '
                   f'({_summary(hard_unexpected)})')
    raise ValueError(f'Checkpoint {pretrained_path} does not fit {name}: '
                     f'{"; ".join(parts)}. Pick the matching model_name or pass '
                     'strict=False.')

  params, mismatched = {}, []
  for key, init_value in sorted(init.items()):
    if key.startswith('head/') or key not in restored:
      params[key] = init_value
      continue
    value = restored[key]
    if key.startswith('pre_logits/') and value.shape != init_value.shape:
      # A new representation_size is a deliberate choice: start that layer anew.
      logging.warning('load_pretrained: %s is %s in the checkpoint but %s in '
                      'the model; kept from init_params', key, value.shape,
                      init_value.shape)
      params[key] = init_value
      continue
    if (key == _POSEMB and value.shape != init_value.shape and
        value.shape[-1] == init_value.shape[-1]):
      value = _adapt_posemb(value, init_value, old_token, new_token, grid,
                            pretrained_grid)
    if value.shape != init_value.shape:
      mismatched.append((key, value.shape, init_value.shape))
      continue
    params[key] = value.astype(init_value.dtype, copy=False)
  if mismatched:
    key, got, want = mismatched[0]
    more = (f' (and {len(mismatched) - 1} more mismatched keys)'
            if len(mismatched) > 1 else '')
    raise ValueError(f'Checkpoint {pretrained_path} key {key!r} has shape {got} '
                     f'but {name} expects {want}{more}; check model_name and '
                     'its overrides.')
  if 'pre_logits/kernel' in restored and 'pre_logits/kernel' not in init:
    logging.info('load_pretrained: drop-head variant, pre_logits removed')
  return _unflatten(params, pretrained_path)


def _adapt_posemb(posemb: np.ndarray, init_posemb: np.ndarray, old_token: bool,
                  new_token: bool, grid: Optional[Sequence[int]],
                  pretrained_grid: Optional[Sequence[int]]) -> np.ndarray:
  """Checkpoint posemb -> the new model's shape (class token, grid)."""
  if old_token and not new_token:
    posemb = posemb[:, 1:]
  elif new_token and not old_token:
    posemb = np.concatenate([init_posemb[:, :1], posemb], axis=1)
  new = grid if grid is not None else init_posemb.shape[1] - int(new_token)
  new_grid = _as_grid(new, 'the new model')
  if new_grid[0] * new_grid[1] + int(new_token) != init_posemb.shape[1]:
    raise ValueError(f'grid={tuple(new_grid)} does not match the model\'s '
                     f'{init_posemb.shape[1]} position embeddings.')
  logging.info('load_pretrained: resized position embeddings %s -> %s',
               posemb.shape, init_posemb.shape)
  return interpolate_posemb(posemb, new_grid, new_token, old_grid=pretrained_grid)
