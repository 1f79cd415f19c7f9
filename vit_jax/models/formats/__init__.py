"""Checkpoint formats: read any of them into the vit_jax tree, write the tree into any.

Formats (named as `--to_format` takes them):
  npz   the published layout (`vit_jax.checkpoint.load/save`), local or gs://;
  timm  a timm VisionTransformer state dict: `.safetensors` (read and written
        with numpy, no torch) or `.pth`/`.bin`/`.pt` (torch, read only through
        `torch.load(weights_only=True)`);
  hf    a transformers ViT directory: `config.json` + `model.safetensors` (or
        `pytorch_model.bin`, sharded files with their index), optionally
        `preprocessor_config.json`.
A `.safetensors`/`.bin` file whose keys are transformers' is read as `hf` with
the `config.json` beside it. `read` also returns the architecture the file
implies (a preset name plus `get_model` overrides); timm state dicts do not
record the number of heads, so they need `model` (a preset or timm model name)
or `num_heads`.
"""
import dataclasses
import io
import json
import os
import pickle
import re
import shutil
import tempfile
from typing import Any, Mapping, Optional
import zipfile

from absl import logging
import flax.linen as nn
import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

from vit_jax import errors
from vit_jax import fileio
from vit_jax import models
from vit_jax.models.formats import hf
from vit_jax.models.formats import npz
from vit_jax.models.formats import timm

Params = dict[str, Any]
FORMATS = ('npz', 'timm', 'hf')
_TORCH_EXTS = ('.pth', '.bin', '.pt')
_STATE_EXTS = ('.safetensors',) + _TORCH_EXTS
_HF_WEIGHTS = ('model.safetensors', 'model.safetensors.index.json',
               'pytorch_model.bin', 'pytorch_model.bin.index.json')
# Architectures for checkpoints that fit no preset: every field is overridden.
_BASE_PRESETS = {'vit': 'ViT-B_16', 'hybrid': 'R50+ViT-B_16', 'mixer': 'Mixer-B_16'}
# Keys of a .pth that wrap the state dict (timm and torchvision training scripts).
_WRAPPERS = ('state_dict', 'model', 'state_dict_ema', 'model_ema')


@dataclasses.dataclass(frozen=True)
class Checkpoint:
  """Parameters read from any format, with the architecture they imply."""
  params: Params
  model_name: str
  overrides: dict
  format: str
  path: str

  def get_model(self, **overrides: Any) -> nn.Module:
    """The flax module these parameters fit (`overrides` win, e.g. num_classes)."""
    return models.get_model(self.model_name, **{**self.overrides, **overrides})


# ----------------------------------------------------------------------------
# Paths and formats.


def _sniff(path: str) -> Optional[str]:
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


def detect_format(path: str, to_format: Optional[str] = None,
                  writing: bool = False) -> str:
  """The format ('npz', 'timm' or 'hf') of `path`, read off its name (or contents)."""
  path = os.fspath(path)
  if to_format is not None and to_format not in FORMATS:
    raise ValueError(f'Unknown format {to_format!r}; use one of '
                     f'{", ".join(FORMATS)}.')
  lower = path.lower().rstrip('/')
  ext = os.path.splitext(lower)[1]
  if to_format is not None:
    if to_format == 'hf' and ext in ('.npz',) + _STATE_EXTS:
      raise ValueError(f'{path}: the hf format is a directory (config.json + '
                       'model.safetensors); pass a directory path.')
    if to_format == 'timm' and ext not in _STATE_EXTS:
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
  if ext in _STATE_EXTS:
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
  kind = _sniff(path)
  if kind == 'npz':
    return 'npz'
  if kind in ('torch', 'safetensors'):
    return _state_dict_format(path, kind)
  raise ValueError(f'Checkpoint {path} is neither .npz, .safetensors, a torch '
                   'state dict nor a transformers directory; name it by its '
                   'format.')


def _state_dict_format(path: str, kind: Optional[str] = None) -> str:
  """'hf' when a state dict file holds transformers keys, else 'timm'."""
  _check_file(path)
  kind = kind or ('safetensors' if path.lower().endswith('.safetensors')
                  else 'torch')
  if kind == 'safetensors':
    keys = _safetensors_keys(path)
  else:
    keys = read_state_dict(path).keys()
  return 'hf' if hf.looks_like_hf(keys) else 'timm'


def _check_file(path: str) -> None:
  if not os.path.exists(path):
    raise FileNotFoundError(f'Checkpoint {path} does not exist; check the path.')
  if os.path.isdir(path):
    raise IsADirectoryError(f'Checkpoint {path} is a directory; pass the file.')
  if os.path.getsize(path) == 0:
    raise ValueError(f'Checkpoint {path} is empty (0 bytes); download or write '
                     'it again.')


# ----------------------------------------------------------------------------
# State dict files.


def _safetensors_keys(path: str) -> list[str]:
  try:
    with safetensors.safe_open(path, 'np') as f:
      return list(f.keys())
  except Exception as e:  # pylint: disable=broad-except  # SafetensorError is no public class
    raise ValueError(f'Checkpoint {path} is truncated or not a safetensors file '
                     f'({errors.first_line(e, None)}); download or write it again.') from None


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
  """Every tensor of a .safetensors file as numpy (bfloat16 via ml_dtypes), no torch."""
  _check_file(path)
  _safetensors_keys(path)  # validates the header and the file length
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
  _check_file(path)
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
  elif path.lower().endswith(_TORCH_EXTS):
    state = _read_torch(path)
  else:
    kind = _sniff(path) if os.path.isfile(path) else None
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


def _check_writable_file(path: str) -> None:
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'Cannot write {path}: directory {directory} does not '
                            'exist; create it first.')
  if os.path.isdir(path):
    raise IsADirectoryError(f'Cannot write {path}: it is a directory.')


def _safetensors_bytes(state: Mapping[str, np.ndarray]) -> bytes:
  arrays = {k: np.ascontiguousarray(v) for k, v in state.items()}
  # format=pt: transformers' from_pretrained checks it.
  return safetensors.numpy.save(arrays, metadata={'format': 'pt'})


def _torch_bytes(state: Mapping[str, np.ndarray]) -> bytes:
  torch = _torch()
  buffer = io.BytesIO()
  torch.save({k: torch.from_numpy(np.ascontiguousarray(v))
              for k, v in state.items()}, buffer)
  return buffer.getvalue()


# ----------------------------------------------------------------------------
# Architecture.


def _shape(tree: Mapping[str, Any], *path: str) -> Optional[tuple]:
  node = tree
  for key in path:
    if not isinstance(node, Mapping) or key not in node:
      return None
    node = node[key]
  return tuple(np.shape(node))


def architecture(params: Mapping[str, Any], source: str = 'Parameters'
                 ) -> dict:
  """get_model fields of the ViT/hybrid/Mixer that `params` fit, from their shapes.

  `source` starts the error messages ('Checkpoint PATH').
  """
  if 'stem' in params:
    stem = _shape(params, 'stem', 'kernel')
    tok = _shape(params, 'MixerBlock_0', 'token_mixing', 'Dense_0', 'kernel')
    ch = _shape(params, 'MixerBlock_0', 'channel_mixing', 'Dense_0', 'kernel')
    if stem is None or tok is None or ch is None or len(stem) != 4:
      raise ValueError(f'{source}: a Mixer stem but no Mixer blocks; this fits '
                       'no vit_jax model.')
    blocks = sum(1 for k in params if re.fullmatch(r'MixerBlock_\d+', k))
    head = _shape(params, 'head', 'kernel')
    return {'patches': {'size': tuple(stem[:2])}, 'hidden_dim': stem[3],
            'num_blocks': blocks, 'tokens_mlp_dim': tok[1],
            'channels_mlp_dim': ch[1], 'num_classes': head[1] if head else 0}
  kernel = _shape(params, 'embedding', 'kernel')
  query = _shape(params, 'Transformer', 'encoderblock_0',
                 'MultiHeadDotProductAttention_0', 'query', 'kernel')
  dense = _shape(params, 'Transformer', 'encoderblock_0', 'MlpBlock_0',
                 'Dense_0', 'kernel')
  if kernel is None or len(kernel) != 4 or query is None or len(query) != 3 or (
      dense is None):
    raise ValueError(f'{source}: no ViT patch embedding and encoder blocks '
                     '(embedding/kernel, Transformer/encoderblock_0/...); this '
                     'fits no vit_jax model.')
  width = kernel[3]
  if query[0] != width or dense[0] != width:
    raise ValueError(f'{source}: embedding width {width} but encoder block '
                     f'width {query[0]}; this fits no vit_jax model.')
  layers = sum(1 for k in params['Transformer']
               if re.fullmatch(r'encoderblock_\d+', k))
  arch: dict[str, Any] = {
      'patches': {'size': tuple(kernel[:2])},
      'hidden_size': width,
      'transformer': {'mlp_dim': dense[1], 'num_heads': query[1],
                      'num_layers': layers},
      'classifier': 'token' if 'cls' in params else 'gap',
      'representation_size': (_shape(params, 'pre_logits', 'kernel') or
                              (None, None))[1],
      'num_classes': (_shape(params, 'head', 'kernel') or (None, 0))[1],
      'resnet': None,
      'fc_norm': 'fc_norm' in params,
  }
  if 'conv_root' in params:
    root = _shape(params, 'conv_root', 'kernel')
    units = []
    i = 1
    while f'block{i}' in params:
      units.append(sum(1 for k in params[f'block{i}']
                       if re.fullmatch(r'unit\d+', k)))
      i += 1
    arch['resnet'] = {'num_layers': tuple(units), 'width_factor': root[3] / 64}
  return arch


def _kind(arch: Mapping[str, Any]) -> str:
  if 'num_blocks' in arch:
    return 'mixer'
  return 'hybrid' if arch.get('resnet') else 'vit'


def _fit(preset: str, arch: Mapping[str, Any], ignore_heads: bool = False
         ) -> list[str]:
  """The fields where `arch` differs from the preset (empty: it fits)."""
  cfg = models.get_model_config(preset).to_dict()
  if _kind(arch) != _kind(cfg):
    return [f'a {_kind(arch)} checkpoint, a {_kind(cfg)} model']
  diff = []
  if tuple(cfg['patches']['size']) != tuple(arch['patches']['size']):
    diff.append(f'patch size {tuple(arch["patches"]["size"])} != '
                f'{tuple(cfg["patches"]["size"])}')
  if 'num_blocks' in cfg:
    for key in ('hidden_dim', 'num_blocks', 'tokens_mlp_dim', 'channels_mlp_dim'):
      if cfg[key] != arch[key]:
        diff.append(f'{key} {arch[key]} != {cfg[key]}')
    return diff
  if cfg['hidden_size'] != arch['hidden_size']:
    diff.append(f'hidden_size {arch["hidden_size"]} != {cfg["hidden_size"]}')
  for key in ('mlp_dim', 'num_layers') + (() if ignore_heads else ('num_heads',)):
    if cfg['transformer'][key] != arch['transformer'][key]:
      diff.append(f'{key} {arch["transformer"][key]} != {cfg["transformer"][key]}')
  has_token = cfg['classifier'] in ('token', 'token_unpooled')
  if has_token != (arch['classifier'] == 'token'):
    diff.append('class token' + (' missing' if has_token else ' present'))
  if cfg.get('resnet'):
    resnet = arch['resnet']
    if tuple(cfg['resnet']['num_layers']) != tuple(resnet['num_layers']) or (
        cfg['resnet']['width_factor'] != resnet['width_factor']):
      diff.append(f'resnet {resnet} != {cfg["resnet"]}')
  return diff


def fitting_presets(arch: Mapping[str, Any], ignore_heads: bool = False) -> list[str]:
  """Presets whose architecture `arch` matches (heads ignored on request)."""
  return [name for name in models.MODEL_CONFIGS
          if not _fit(name, arch, ignore_heads)]


def _describe(arch: Mapping[str, Any]) -> str:
  if 'num_blocks' in arch:
    return (f'Mixer width {arch["hidden_dim"]}, {arch["num_blocks"]} blocks, '
            f'patch {arch["patches"]["size"][0]}')
  t = arch['transformer']
  hybrid = f'ResNet {arch["resnet"]["num_layers"]} + ' if arch['resnet'] else ''
  return (f'{hybrid}width {arch["hidden_size"]}, {t["num_layers"]} layers, MLP '
          f'{t["mlp_dim"]}, patch {arch["patches"]["size"][0]}')


def _resolve_model(model: str) -> str:
  """A preset name for `model`: a preset itself or a timm model name."""
  if model in models.MODEL_CONFIGS:
    return model
  preset = timm.preset_for(model)
  if preset:
    return preset
  raise ValueError(f'Unknown model {model!r}: neither a vit_jax preset nor a timm '
                   f'model name that is one ({", ".join(sorted(timm.TIMM_PRESETS))}'
                   '); for other architectures pass --num_heads instead.')


def _check_fit(path: str, preset: str, arch: Mapping[str, Any],
               ignore_heads: bool = False) -> None:
  diff = _fit(preset, arch, ignore_heads)
  if diff:
    fits = fitting_presets(arch, ignore_heads)
    # A timm file's size may have no preset: then only the heads are missing.
    other = ' or pass --num_heads instead' if ignore_heads else ''
    raise ValueError(f'Checkpoint {path} does not fit model {preset!r}: '
                     f'{"; ".join(diff[:3])}. Pick the model it was trained as'
                     f'{other} (shapes fit: {", ".join(fits) or "no preset"}).')


def _as_checkpoint(params: Params, arch: dict, model: Optional[str], fmt: str,
                   path: str) -> Checkpoint:
  """Names the preset `params` fit (or `model`, checked) and its overrides."""
  free = {'num_classes': arch['num_classes']}
  if 'num_blocks' not in arch:
    free['representation_size'] = arch['representation_size']
  if arch.get('fc_norm'):  # the head's norm, which no preset has
    free['fc_norm'] = True
  if model is not None:
    preset = _resolve_model(model)
    _check_fit(path, preset, arch)
    return Checkpoint(params, preset, free, fmt, path)
  fits = fitting_presets(arch)
  if fits:
    return Checkpoint(params, fits[0], free, fmt, path)
  # No preset: the closest family's preset with every architecture field set.
  overrides = {k: v for k, v in arch.items() if k != 'transformer'}
  if 'transformer' in arch:
    overrides.update(arch['transformer'])
  if overrides.get('resnet') is None:
    overrides.pop('resnet', None)
  logging.info('Checkpoint %s fits no preset; using %s with overrides %s', path,
               _BASE_PRESETS[_kind(arch)], overrides)
  return Checkpoint(params, _BASE_PRESETS[_kind(arch)], overrides, fmt, path)


# ----------------------------------------------------------------------------
# Reading.


def _read_json(path: str) -> dict:
  try:
    with open(path) as f:
      data = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f'{path} is not readable JSON ({errors.first_line(e, None)}).') from None
  if not isinstance(data, dict):
    raise ValueError(f'{path} is not a JSON object.')
  return data


def _hf_weights(directory: str) -> dict[str, np.ndarray]:
  """The weights of a transformers directory (single file or sharded)."""
  for name in _HF_WEIGHTS:
    path = os.path.join(directory, name)
    if not os.path.exists(path):
      continue
    if not name.endswith('.index.json'):
      return read_state_dict(path)
    index = _read_json(path).get('weight_map')
    if not isinstance(index, dict):
      raise ValueError(f'{path} has no weight_map; it is not a shard index.')
    state = {}
    for shard in sorted(set(index.values())):
      if os.path.basename(shard) != shard:
        raise ValueError(f'{path} names shard {shard!r} outside its directory.')
      state.update(read_state_dict(os.path.join(directory, shard)))
    return state
  raise FileNotFoundError(f'Checkpoint {directory} has config.json but none of '
                          f'{", ".join(_HF_WEIGHTS)}.')


def _read_hf(path: str, exact_gelu: str) -> Params:
  directory = path if os.path.isdir(path) else os.path.dirname(path)
  config_path = os.path.join(directory, 'config.json')
  if not os.path.exists(config_path):
    raise FileNotFoundError(f'Checkpoint {path} holds transformers weights but '
                            f'{config_path} is missing; pass the model directory '
                            'with its config.json.')
  config = _read_json(config_path)
  hf.check_config(config, config_path, exact_gelu)
  state = _hf_weights(directory) if os.path.isdir(path) else read_state_dict(path)
  pre_path = os.path.join(directory, 'preprocessor_config.json')
  preprocessor = _read_json(pre_path) if os.path.exists(pre_path) else None
  return hf.to_params(state, config, path, preprocessor)


def _read_timm(path: str, model: Optional[str], num_heads: Optional[int]
               ) -> tuple[Params, Optional[str]]:
  state = read_state_dict(path)
  # Every shape but the head count, which the state dict does not hold.
  arch = architecture(timm.to_params(state, 1, path), f'Checkpoint {path}')
  if model is not None:
    model = _resolve_model(model)
    _check_fit(path, model, arch, ignore_heads=True)
    if num_heads is None:
      num_heads = models.get_model_config(model).transformer.num_heads
  if num_heads is None:
    fits = fitting_presets(arch, ignore_heads=True)
    hint = (f'shapes fit {", ".join(fits)}' if fits else
            f'{_describe(arch)} fits no vit_jax preset, so pass --num_heads')
    raise ValueError(f'Checkpoint {path} is a timm state dict, which does not '
                     'record the number of attention heads: pass --model=PRESET '
                     f'or the timm model name, or --num_heads=N ({hint}).')
  if num_heads <= 0:
    raise ValueError(f'num_heads={num_heads} must be positive.')
  return timm.to_params(state, num_heads, path), model


def read(path: str, *, model: Optional[str] = None,
         num_heads: Optional[int] = None, exact_gelu: str = 'error') -> Checkpoint:
  """Reads a checkpoint of any format into the vit_jax tree, with its architecture.

  `model` (a preset or timm model name) names the architecture and is checked
  against the file; `num_heads` is what a timm state dict lacks.
  `exact_gelu='accept'` reads transformers checkpoints with exact GELU.
  """
  path = os.fspath(path)
  fmt = detect_format(path)
  if fmt == 'npz':
    params = npz.load(path)
  elif fmt == 'hf':
    params = _read_hf(path, exact_gelu)
  else:
    params, model = _read_timm(path, model, num_heads)
  check_params(params, path)
  arch = architecture(params, f'Checkpoint {path}')
  return _as_checkpoint(params, arch, model, fmt, path)


def is_other_format(path: str) -> bool:
  """Whether `path` is a timm/transformers checkpoint rather than an .npz."""
  path = os.fspath(path)
  return not fileio.is_remote(path) and (
      os.path.isdir(path) or path.lower().endswith(_STATE_EXTS))


def check_finite(params: Mapping[str, Any], source: str) -> None:
  """Raises a one-line ValueError naming the first parameter that holds NaN or Inf."""
  for key, value in npz.flatten(params).items():
    value = np.asarray(value)
    if np.issubdtype(value.dtype, np.floating) or value.dtype.kind == 'V':
      value = value.astype(np.float32)
    if value.dtype.kind in 'fc' and not np.isfinite(value).all():
      bad = int(np.size(value) - np.isfinite(value).sum())
      raise ValueError(f'Checkpoint {source} holds NaN or Inf in {key} ({bad} of '
                       f'{np.size(value)} values); it was saved from a diverged run or '
                       'is damaged: use an earlier checkpoint.')


def check_params(params: Mapping[str, Any], source: str) -> None:
  """One-line ValueError unless every parameter is a float array free of NaN and Inf."""
  for key, value in npz.flatten(params).items():
    dtype = np.asarray(value).dtype
    if dtype.kind != 'f' and dtype.name != 'bfloat16':
      raise ValueError(f'Checkpoint {source} stores {key} as {dtype}, where model '
                       'parameters are floats; it is damaged or quantized: use the '
                       'float checkpoint.')
  check_finite(params, source)


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


def read_params(path: str, *, num_heads: Optional[int] = None,
                exact_gelu: str = 'error') -> Params:
  """Only the parameters of a checkpoint of any format (no preset check), checked by check_params."""
  fmt = detect_format(os.fspath(path))
  if fmt == 'npz':
    params = npz.load(path)
  elif fmt == 'hf':
    params = _read_hf(os.fspath(path), exact_gelu)
  elif num_heads is None:
    raise ValueError(f'Checkpoint {path} is a timm state dict, which does not '
                     'record the number of heads; pass num_heads.')
  else:
    params = timm.to_params(read_state_dict(path), num_heads, os.fspath(path))
  check_params(params, os.fspath(path))
  return params


# ----------------------------------------------------------------------------
# Writing.


def _write_hf(state, config, preprocessor, path: str) -> None:
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
    _write_hf_files(state, config, preprocessor, path, parent)


def _write_hf_files(state, config, preprocessor, path: str, parent: str) -> None:
  tmp = tempfile.mkdtemp(dir=parent, prefix='.tmp-' + os.path.basename(path))
  try:
    with open(os.path.join(tmp, 'model.safetensors'), 'wb') as f:
      f.write(_safetensors_bytes(state))
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


def write(params: Mapping[str, Any], path: str, *, to_format: Optional[str] = None,
          drop_head: bool = False) -> str:
  """Writes vit_jax `params` to `path` in its format (or `to_format`); returns the format.

  `drop_head` leaves out the head and the pre-logits layer (the backbone only).
  Everything is converted before anything is written; files appear atomically.
  """
  path = os.fspath(path)
  fmt = detect_format(path, to_format, writing=True)
  params = dict(params)
  if drop_head:
    params.pop('head', None)
    if fmt == 'timm':  # timm's ViT has no pre-logits layer either
      params.pop('pre_logits', None)
  # Refuses trees that are no vit_jax model before anything is written.
  architecture(params, f'Parameters to write to {path}')
  if fmt == 'npz':
    npz.save(params, path)
  elif fmt == 'timm':
    state = timm.from_params(params, path)
    _check_writable_file(path)
    fileio.atomic_write(path, _safetensors_bytes(state)
                        if path.lower().endswith('.safetensors') else _torch_bytes(state))
  else:
    state, config, preprocessor = hf.from_params(params, path)
    _write_hf(state, config, preprocessor, path)
  return fmt


def convert(from_path: str, to_path: str, *, model: Optional[str] = None,
            num_heads: Optional[int] = None, to_format: Optional[str] = None,
            drop_head: bool = False, exact_gelu: str = 'error'
            ) -> tuple[Checkpoint, str]:
  """Reads `from_path` in any format and writes it to `to_path`; returns (what was read, format written)."""
  fileio.check_output(to_path, '--to', [('--from', from_path)])
  # The output format is checked before the (possibly large) input is read.
  detect_format(os.fspath(to_path), to_format, writing=True)
  ckpt = read(from_path, model=model, num_heads=num_heads, exact_gelu=exact_gelu)
  fmt = write(ckpt.params, to_path, to_format=to_format, drop_head=drop_head)
  return ckpt, fmt
