"""timm's same-size ViT as the benchmark's peer: its constructor arguments and its process.

`timm_kwargs(model, resolution)` maps any of our ViTs (a preset or a config's model) to the
keyword arguments of `timm.models.vision_transformer.VisionTransformer` with the same
dimensions and layout, so that both sides count the same parameters and FLOPs.
`PeerProcess` runs the repository's tools/bench_timm.py (torch code, outside the package)
in its own Python: on a GPU it times the step once, under torch.compile, before JAX
claims the device; on CPU it stays up and times one window each time it is asked, so the
benchmark can alternate our windows with timm's on the same cores.
"""
import json
import os
import subprocess
import sys
from typing import Any, Optional

from vit_jax.models import vit as vit_lib

# Our activation names -> timm's act_layer names (timm.layers.create_act).
_ACTIVATIONS = {'gelu_tanh': 'gelu_tanh', 'gelu': 'gelu', 'quick_gelu': 'quick_gelu'}
_POOLS = {'token': 'token', 'gap': 'avg', 'map': 'map'}

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'tools', 'bench_timm.py')


def timm_kwargs(model: Any, resolution: int) -> dict[str, Any]:
  """JSON-able VisionTransformer(**kwargs) of timm for our ViT `model` at `resolution` px.

  `act_layer` is a timm activation name and `norm_eps` the LayerNorm epsilon (the
  script turns it into norm_layer). One-line ValueError for what timm's ViT lacks.
  """
  if not isinstance(model, vit_lib.VisionTransformer) or model.resnet is not None:
    raise ValueError(f'--compare=timm needs a plain ViT; {type(model).__name__}'
                     f'{" (a ResNet hybrid)" if getattr(model, "resnet", None) else ""} '
                     "has no timm VisionTransformer counterpart.")
  if model.representation_size:
    raise ValueError('--compare=timm: timm\'s ViT has no pre-logits layer; set '
                     'config.model.representation_size=0.')
  if model.norm != 'layer_norm':
    raise ValueError(f'--compare=timm: norm {model.norm!r} has no timm counterpart here; '
                     'use layer_norm.')
  if model.classifier not in _POOLS or model.activation not in _ACTIVATIONS:
    raise ValueError(f'--compare=timm: classifier {model.classifier!r} / activation '
                     f'{model.activation!r} has no timm counterpart here; use '
                     f'{"/".join(_POOLS)} and {"/".join(_ACTIVATIONS)}.')
  t = dict(model.transformer)
  width, mlp_dim = model.hidden_size, t['mlp_dim']
  patch = tuple(model.patches['size'])
  if patch[0] != patch[1]:
    raise ValueError(f'--compare=timm: patches {patch} are not square.')
  if resolution % patch[0]:
    raise ValueError(f'--compare=timm: resolution {resolution} is not divisible by the '
                     f'patch size {patch[0]}.')
  dropout = t.get('dropout_rate', 0.0) or 0.0
  # The switches timm names as we do (vit_jax/models/vit/options.py).
  same = {o.name: bool(getattr(model, o.name)) for o in vit_lib.OPTIONS
          if o.timm == o.name and o.allowed == (True, False)}
  return {**same,
      'img_size': resolution, 'patch_size': patch[0], 'in_chans': 3,
      'num_classes': model.num_classes or 0,
      'embed_dim': width, 'depth': t['num_layers'], 'num_heads': t['num_heads'],
      # timm's MLP width is int(embed_dim * mlp_ratio): exact for every integer mlp_dim.
      'mlp_ratio': mlp_dim / width,
      'class_token': vit_lib.has_class_token(model),
      'global_pool': _POOLS[model.classifier],
      'reg_tokens': int(model.num_registers),
      'init_values': model.layer_scale or None,
      'drop_rate': 0.0, 'pos_drop_rate': dropout, 'proj_drop_rate': dropout,
      'attn_drop_rate': t.get('attention_dropout_rate', 0.0) or 0.0,
      'drop_path_rate': float(model.stochastic_depth or 0.0),
      'act_layer': _ACTIVATIONS[model.activation],
      'norm_eps': float(model.layer_norm_epsilon),
  }


def cpu_threads() -> int:
  """The cores this process may run on: what XLA:CPU's thread pool sizes itself to."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


class PeerProcess:
  """tools/bench_timm.py in its own Python; `window()` times one window on CPU."""

  def __init__(self, python: str, kwargs: dict[str, Any], args: Any):
    """Starts the script; `args` gives batch, mode, steps, warmup, repeats, optimizer, clip."""
    cmd = [python, SCRIPT, '--serve', f'--timm_kwargs={json.dumps(kwargs)}',
           f'--batch={args.batch}', f'--mode={args.mode}', f'--steps={args.steps}',
           f'--warmup={args.warmup}', f'--repeats={args.repeats}',
           f'--optimizer={args.optimizer}', f'--clip={args.clip}',
           f'--threads={cpu_threads()}']
    self.info: dict[str, Any] = {}
    self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
    self.info = self._read()

  def _read(self) -> dict[str, Any]:
    """The script's next JSON line, or {'error': ...} when it ended without one."""
    for line in self._proc.stdout:
      if line.startswith('{'):
        return json.loads(line)
    self._proc.wait()
    tail = self._proc.stderr.read().strip().splitlines()[-1:] or ['']
    return {'error': f'exit {self._proc.returncode}: {tail[0][:300]}'}

  @property
  def serving(self) -> bool:
    """Whether the peer waits for window requests (CPU) rather than having finished."""
    return bool(self.info.get('serving'))

  def window(self, steps: int) -> Optional[float]:
    """Seconds per step of one timed window of `steps` steps (None if the peer died)."""
    self._proc.stdin.write(f'{steps}\n')
    self._proc.stdin.flush()
    out = self._read()
    return out.get('sec')

  def close(self) -> None:
    """Ends the script (it exits on end of input)."""
    if self._proc.poll() is None:
      self._proc.stdin.close()
      self._proc.wait(timeout=60)


def start(python: str, model: Any, resolution: int, args: Any) -> PeerProcess:
  """The peer for our `model`: ValueError when it has no timm form or the script is absent."""
  if not os.path.exists(SCRIPT):
    raise ValueError(f'--compare=timm runs {SCRIPT}, which this install lacks: run from '
                     'a checkout of the repository.')
  return PeerProcess(python or sys.executable, timm_kwargs(model, resolution), args)
