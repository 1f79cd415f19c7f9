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
the format, `arch` infers the architecture (asking the tree's family), and `npz`,
`timm`, `hf` map each format's names onto the vit_jax tree. `registry` holds the
formats by name (a new one is a module with one `registry.register(Format(...))`);
this module registers the built-in three and dispatches through it.
"""
import os
from typing import Any, Mapping, Optional

import numpy as np

from vit_jax import fileio
from vit_jax import models
from vit_jax.models import families
from vit_jax.models.formats import arch
from vit_jax.models.formats import detect
from vit_jax.models.formats import files
from vit_jax.models.formats import npz
from vit_jax.models.formats import registry
from vit_jax.models.vit import hf
from vit_jax.models.vit import timm

# The public names of the modules this package dispatches to.
Checkpoint = arch.Checkpoint
architecture = arch.architecture
architecture_differences = arch.differences
tree_differences = arch.tree_differences
fitting_presets = arch.fitting_presets
Format = registry.Format
register = registry.register
FORMATS = registry.FORMATS
detect_format = detect.detect_format
is_other_format = detect.is_other_format
check_readable = detect.check_readable
MissingDependencyError = files.MissingDependencyError
read_state_dict = files.read_state_dict
Params = dict[str, Any]


def _read_hf(path: str) -> tuple[Params, dict]:
  directory = path if os.path.isdir(path) else os.path.dirname(path)
  config_path = os.path.join(directory, 'config.json')
  if not os.path.exists(config_path):
    raise FileNotFoundError(f'Checkpoint {path} holds transformers weights but '
                            f'{config_path} is missing; pass the model directory '
                            'with its config.json.')
  config = files.read_json(config_path)
  hf.check_config(config, config_path)
  state = files.hf_weights(directory) if os.path.isdir(path) else files.read_state_dict(path)
  pre_path = os.path.join(directory, 'preprocessor_config.json')
  preprocessor = files.read_json(pre_path) if os.path.exists(pre_path) else None
  return hf.to_params(state, config, path, preprocessor), hf.options(config)


def _check_options(options: Mapping[str, Any]) -> None:
  unknown = sorted(set(options) - set(timm.OPTION_KEYS))
  if unknown:
    raise ValueError(f'Unknown checkpoint option {unknown[0]!r}; a state dict leaves '
                     f'only {", ".join(timm.OPTION_KEYS)} to be given.')


def _read_timm(path: str, model: Optional[str], num_heads: Optional[int],
               options: Mapping[str, Any]) -> tuple[Params, Optional[str], dict]:
  """(params, the preset `model` names or None, the ViT options the file lacks)."""
  if model is None and num_heads is None:
    # timm's config.json beside the file (a timm hub repository) names what it is.
    model, num_heads = timm.config_model(files.timm_config(os.path.dirname(path)) or {})
  named = None
  if model is not None and model not in models.MODEL_CONFIGS and not timm.preset_for(model):
    named = timm.name_options(model)
    if named is None:
      arch.resolve_model(model)  # the one-line "Unknown model" error
  state = files.read_state_dict(path)
  no_embed = options.get('no_embed_class', (named or {}).get('no_embed_class'))
  # Every shape but the head count, which the state dict does not hold (unless qk_norm).
  shapes = arch.architecture(timm.to_params(state, timm.heads_of(state) or 1, path, no_embed),
                             f'Checkpoint {path}')
  preset = None
  if named is not None:
    if named['width'] != shapes['hidden_size']:
      raise ValueError(f'Checkpoint {path} does not fit model {model!r}: width '
                       f'{shapes["hidden_size"]} != {named["width"]}. Pick the timm model it '
                       'was saved from, or pass --num_heads instead.')
    if num_heads is None:
      num_heads = named['num_heads']
  elif model is not None:
    preset = arch.resolve_model(model)
    arch.check_fit(path, preset, shapes, ignore_heads=True)
    if num_heads is None:
      num_heads = models.get_model_config(preset).transformer.num_heads
  num_heads = num_heads or timm.heads_of(state)
  if num_heads is None:
    fits = arch.fitting_presets(shapes, ignore_heads=True)
    hint = (f'shapes fit {", ".join(fits)}' if fits else
            f'{arch.describe(shapes)} fits no vit_jax preset, so pass --num_heads')
    raise ValueError(f'Checkpoint {path} is a timm state dict, which does not '
                     'record the number of attention heads: pass --model=PRESET '
                     f'or the timm model name, or --num_heads=N ({hint}).')
  if num_heads <= 0:
    raise ValueError(f'num_heads={num_heads} must be positive.')
  # timm's defaults (exact GELU, eps 1e-6), then the name's, then the caller's.
  extras = {'activation': 'gelu', 'layer_norm_epsilon': 1e-6}
  extras.update({k: v for k, v in (named or {}).items() if k in timm.OPTION_KEYS})
  extras.update(options)
  return timm.to_params(state, num_heads, path, no_embed), preset, extras


def read(path: str, *, model: Optional[str] = None,
         num_heads: Optional[int] = None,
         options: Optional[Mapping[str, Any]] = None) -> Checkpoint:
  """Reads a checkpoint of any format into the vit_jax tree, with its architecture.

  `model` (a preset or timm model name) names the architecture and is checked
  against the file; `num_heads` is what a timm state dict lacks, and `options`
  (activation, layer_norm_epsilon, classifier, class_token, no_embed_class) what
  else it lacks (timm's defaults, or the timm name's, otherwise). transformers
  configs record all of it.
  """
  path = os.fspath(path)
  options = dict(options or {})
  _check_options(options)
  fmt = detect.detect_format(path)
  params, model, extras = registry.FORMATS[fmt].read(path, model, num_heads, options)
  check_params(params, path)
  shapes = arch.architecture(params, f'Checkpoint {path}')
  return arch.as_checkpoint(params, shapes, model, fmt, path, extras)


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



def read_params(path: str, *, num_heads: Optional[int] = None) -> Params:
  """Only the parameters of a checkpoint of any format (no preset check), checked by check_params."""
  path = os.fspath(path)
  params = registry.FORMATS[detect.detect_format(path)].read_params(path, num_heads)
  check_params(params, path)
  return params


def write(params: Mapping[str, Any], path: str, *, to_format: Optional[str] = None,
          drop_head: bool = False, options: Optional[Mapping[str, Any]] = None) -> str:
  """Writes vit_jax `params` to `path` in its format (or `to_format`); returns the format.

  `drop_head` leaves out the head(s) and the pre-logits layer (the backbone only).
  `options` are the model's fields the tree does not hold (activation,
  layer_norm_epsilon, ...), which a transformers config.json records and an .npz
  keeps in its model record (npz.MODEL_RECORD).
  Everything is converted before anything is written; files appear atomically.
  """
  path = os.fspath(path)
  fmt = registry.FORMATS[detect.detect_format(path, to_format, writing=True)]
  params = dict(params)
  if drop_head:
    for key in ('head', 'head_dist') + fmt.head_extras:
      params.pop(key, None)
  # Refuses trees that are no vit_jax model before anything is written.
  shapes = arch.architecture(params, f'Parameters to write to {path}')
  family = families.of_config(shapes)
  if not fmt.container and fmt.name not in family.formats:
    raise ValueError(f'{path}: the {family.name} family has no {fmt.name} conversion (it '
                     f'speaks {", ".join(family.formats) or "only containers"}); write .npz '
                     'instead.')
  fmt.write(params, path, dict(options or {}))
  return fmt.name


def convert(from_path: str, to_path: str, *, model: Optional[str] = None,
            num_heads: Optional[int] = None, to_format: Optional[str] = None,
            drop_head: bool = False,
            options: Optional[Mapping[str, Any]] = None) -> tuple[Checkpoint, str]:
  """Reads `from_path` in any format and writes it to `to_path`; returns (what was read, format written).

  `options`: what a timm state dict does not record (see `read`).
  """
  fileio.check_output(to_path, '--to', [('--from', from_path)])
  # The output format is checked before the (possibly large) input is read.
  detect.detect_format(os.fspath(to_path), to_format, writing=True)
  ckpt = read(from_path, model=model, num_heads=num_heads, options=options)
  fmt = write(ckpt.params, to_path, to_format=to_format, drop_head=drop_head,
              options=_model_options(ckpt))
  return ckpt, fmt


def _model_options(ckpt: Checkpoint) -> dict:
  """The activation and LayerNorm epsilon of the model a checkpoint was read as."""
  cfg = models.get_model_config(ckpt.model_name).to_dict()
  cfg.update(ckpt.overrides)
  return {k: cfg[k] for k in ('activation', 'layer_norm_epsilon') if k in cfg}


# The built-in formats; timm and transformers are conversions the ViT family speaks.

def _read_npz(path: str, model: Optional[str], num_heads: Optional[int],
              options: Mapping[str, Any]) -> tuple[Params, Optional[str], dict]:
  del num_heads
  params, recorded = npz.load_with_options(path)
  return params, model, {**recorded, **options}


def _read_hf_checkpoint(path: str, model: Optional[str], num_heads: Optional[int],
                        options: Mapping[str, Any]) -> tuple[Params, Optional[str], dict]:
  del num_heads
  params, extras = _read_hf(path)
  return params, model, {**extras, **options}


def _write_npz(params: Params, path: str, options: Mapping[str, Any]) -> None:
  # The options the published layout lacks ride along in its model record.
  npz.save(params, path, {k: v for k, v in options.items() if k in timm.OPTION_KEYS})


def _timm_params(path: str, num_heads: Optional[int]) -> Params:
  if num_heads is None:
    raise ValueError(f'Checkpoint {path} is a timm state dict, which does not '
                     'record the number of heads; pass num_heads.')
  return timm.to_params(files.read_state_dict(path), num_heads, path)


def _write_timm(params: Params, path: str, options: Mapping[str, Any]) -> None:
  del options  # a state dict records no options
  state = timm.from_params(params, path)
  files.check_writable_file(path)
  fileio.atomic_write(path, files.safetensors_bytes(state)
                      if path.lower().endswith('.safetensors') else files.torch_bytes(state))


def _write_hf(params: Params, path: str, options: Mapping[str, Any]) -> None:
  state, config, preprocessor = hf.from_params(params, path, options)
  files.write_hf_dir(state, config, preprocessor, path)


registry.register(registry.Format(
    'npz', read=_read_npz, read_params=lambda path, num_heads: npz.load(path),
    write=_write_npz))
registry.register(registry.Format(
    'timm', read=_read_timm, read_params=_timm_params, write=_write_timm,
    head_extras=('pre_logits',),  # timm's ViT has no pre-logits layer either
    container=False))
registry.register(registry.Format(
    'hf', read=_read_hf_checkpoint,
    read_params=lambda path, num_heads: _read_hf(path)[0], write=_write_hf,
    container=False))
