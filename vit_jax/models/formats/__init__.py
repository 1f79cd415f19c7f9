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

The work is split by job: `files` reads and writes the files, `detect` tells
the format, `arch` infers the architecture, and `npz`, `timm`, `hf` map each
format's names onto the vit_jax tree. This module only dispatches.
"""
import os
from typing import Any, Mapping, Optional

import numpy as np

from vit_jax import fileio
from vit_jax import models
from vit_jax.models.formats import arch
from vit_jax.models.formats import detect
from vit_jax.models.formats import files
from vit_jax.models.formats import hf
from vit_jax.models.formats import npz
from vit_jax.models.formats import timm

# The public names of the modules this package dispatches to.
Checkpoint = arch.Checkpoint
architecture = arch.architecture
fitting_presets = arch.fitting_presets
FORMATS = detect.FORMATS
detect_format = detect.detect_format
is_other_format = detect.is_other_format
check_readable = detect.check_readable
MissingDependencyError = files.MissingDependencyError
read_state_dict = files.read_state_dict
Params = dict[str, Any]


def _read_hf(path: str, exact_gelu: str) -> Params:
  directory = path if os.path.isdir(path) else os.path.dirname(path)
  config_path = os.path.join(directory, 'config.json')
  if not os.path.exists(config_path):
    raise FileNotFoundError(f'Checkpoint {path} holds transformers weights but '
                            f'{config_path} is missing; pass the model directory '
                            'with its config.json.')
  config = files.read_json(config_path)
  hf.check_config(config, config_path, exact_gelu)
  state = files.hf_weights(directory) if os.path.isdir(path) else files.read_state_dict(path)
  pre_path = os.path.join(directory, 'preprocessor_config.json')
  preprocessor = files.read_json(pre_path) if os.path.exists(pre_path) else None
  return hf.to_params(state, config, path, preprocessor)


def _read_timm(path: str, model: Optional[str], num_heads: Optional[int]
               ) -> tuple[Params, Optional[str]]:
  state = files.read_state_dict(path)
  # Every shape but the head count, which the state dict does not hold.
  shapes = arch.architecture(timm.to_params(state, 1, path), f'Checkpoint {path}')
  if model is not None:
    model = arch.resolve_model(model)
    arch.check_fit(path, model, shapes, ignore_heads=True)
    if num_heads is None:
      num_heads = models.get_model_config(model).transformer.num_heads
  if num_heads is None:
    fits = arch.fitting_presets(shapes, ignore_heads=True)
    hint = (f'shapes fit {", ".join(fits)}' if fits else
            f'{arch.describe(shapes)} fits no vit_jax preset, so pass --num_heads')
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
  fmt = detect.detect_format(path)
  if fmt == 'npz':
    params = npz.load(path)
  elif fmt == 'hf':
    params = _read_hf(path, exact_gelu)
  else:
    params, model = _read_timm(path, model, num_heads)
  check_params(params, path)
  shapes = arch.architecture(params, f'Checkpoint {path}')
  return arch.as_checkpoint(params, shapes, model, fmt, path)



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



def read_params(path: str, *, num_heads: Optional[int] = None,
                exact_gelu: str = 'error') -> Params:
  """Only the parameters of a checkpoint of any format (no preset check), checked by check_params."""
  fmt = detect.detect_format(os.fspath(path))
  if fmt == 'npz':
    params = npz.load(path)
  elif fmt == 'hf':
    params = _read_hf(os.fspath(path), exact_gelu)
  elif num_heads is None:
    raise ValueError(f'Checkpoint {path} is a timm state dict, which does not '
                     'record the number of heads; pass num_heads.')
  else:
    params = timm.to_params(files.read_state_dict(path), num_heads, os.fspath(path))
  check_params(params, os.fspath(path))
  return params



def write(params: Mapping[str, Any], path: str, *, to_format: Optional[str] = None,
          drop_head: bool = False) -> str:
  """Writes vit_jax `params` to `path` in its format (or `to_format`); returns the format.

  `drop_head` leaves out the head and the pre-logits layer (the backbone only).
  Everything is converted before anything is written; files appear atomically.
  """
  path = os.fspath(path)
  fmt = detect.detect_format(path, to_format, writing=True)
  params = dict(params)
  if drop_head:
    params.pop('head', None)
    if fmt == 'timm':  # timm's ViT has no pre-logits layer either
      params.pop('pre_logits', None)
  # Refuses trees that are no vit_jax model before anything is written.
  arch.architecture(params, f'Parameters to write to {path}')
  if fmt == 'npz':
    npz.save(params, path)
  elif fmt == 'timm':
    state = timm.from_params(params, path)
    files.check_writable_file(path)
    fileio.atomic_write(path, files.safetensors_bytes(state)
                        if path.lower().endswith('.safetensors') else files.torch_bytes(state))
  else:
    state, config, preprocessor = hf.from_params(params, path)
    files.write_hf_dir(state, config, preprocessor, path)
  return fmt


def convert(from_path: str, to_path: str, *, model: Optional[str] = None,
            num_heads: Optional[int] = None, to_format: Optional[str] = None,
            drop_head: bool = False, exact_gelu: str = 'error'
            ) -> tuple[Checkpoint, str]:
  """Reads `from_path` in any format and writes it to `to_path`; returns (what was read, format written)."""
  fileio.check_output(to_path, '--to', [('--from', from_path)])
  # The output format is checked before the (possibly large) input is read.
  detect.detect_format(os.fspath(to_path), to_format, writing=True)
  ckpt = read(from_path, model=model, num_heads=num_heads, exact_gelu=exact_gelu)
  fmt = write(ckpt.params, to_path, to_format=to_format, drop_head=drop_head)
  return ckpt, fmt
