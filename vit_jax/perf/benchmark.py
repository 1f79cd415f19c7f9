r"""Throughput and MFU of the trainer's own train step (or the eval forward pass).

  python -m vit_jax.perf.benchmark --model=ViT-B_16 --batch=256 --resolution=224 \
      --mode=train --optimizer=adam --steps=20 --compare=timm

Times exactly what the trainer runs: the model from the config (models.from_config),
the named objective (supervised, masked_patch, mae), optimizer and schedule, and
train.step.make_train_step jitted with the trainer's mesh shardings and state donation,
on a synthetic batch resident on the devices (--input=host feeds a fresh host batch
each step instead). Prints img/s, step time, compile time, peak device memory, analytic FLOPs (train = 3x
forward) and MFU against the peak it names; with --compare=timm it first runs timm's
same-size model (the repository's tools/bench_timm.py, torch code) in its own process
and prints the ratio. Needs neither TensorFlow nor a dataset.
"""
import ast
import json
import os
import statistics
import subprocess
import sys
import time
import types
from typing import Any, Optional, Sequence

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import configs
from vit_jax import errors
from vit_jax import fileio
from vit_jax import models
from vit_jax.models import attention as attention_lib
from vit_jax.models import flops
from vit_jax.models import from_config
from vit_jax.models import vit as vit_lib
from vit_jax.parallel import peaks
from vit_jax.parallel import sharding
from vit_jax.perf import profiling
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import step as train_step

MODES = ('train', 'infer')
GiB = 2**30


# The peer measurement: torch code, kept outside the package.
TIMM_SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'tools', 'bench_timm.py')


def make_config(args: Any) -> Any:
  """The train config of the benchmarked step: the base schema with the flags' recipe."""
  c = configs.get_base_config()
  c.model_name = args.model
  c.batch = args.batch
  c.accum_steps = args.accum_steps
  c.optimizer = args.optimizer
  c.grad_clip_norm = args.clip
  c.objective = args.objective
  c.objectives[args.objective].update(parse_options(args.objective_options))
  c.total_steps = 10**6
  c.warmup_steps = 10
  if args.optimizer == 'adam':  # pre-training recipe
    c.base_lr, c.weight_decay = 1e-3, 0.1
  else:  # fine-tuning recipe
    c.base_lr, c.weight_decay = 0.03, 0.0
  c.mesh.data, c.mesh.fsdp = -1, 1
  c.model.update({'dtype': args.dtype, 'attention': args.attention,
                  'remat': args.remat, 'attention_pad_multiple': args.pad_multiple,
                  'scan_layers': args.scan_layers,
                  'patch_embedding': args.patch_embedding,
                  'dropout_rate': args.dropout})
  return c


def parse_options(items: Sequence[str]) -> dict[str, Any]:
  """['decoder_depth=4', 'posemb=learn'] -> {'decoder_depth': 4, 'posemb': 'learn'}."""
  out = {}
  for item in items:
    key, eq, value = item.partition('=')
    if not eq or not key:
      raise ValueError(f'--objective_options: {item!r} is not KEY=VALUE.')
    try:
      out[key] = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      out[key] = value  # a bare word: a string option
  return out


def _memory(device: jax.Device) -> Optional[float]:
  """Peak bytes the allocator handed out on `device`, in GiB (None if unknown)."""
  stats = device.memory_stats() if hasattr(device, 'memory_stats') else None
  if not stats or 'peak_bytes_in_use' not in stats:
    return None
  return stats['peak_bytes_in_use'] / GiB


def _compiled_memory(compiled: Any) -> tuple:
  """(GiB one device needs for the executable, GiB of inputs donated to outputs).

  The first counts arguments, outputs and temporaries, donated buffers once.
  """
  try:
    m = compiled.memory_analysis()
  except Exception:  # pylint: disable=broad-except
    return None, None
  if m is None:
    return None, None
  total = (m.argument_size_in_bytes + m.output_size_in_bytes
           - m.alias_size_in_bytes + m.temp_size_in_bytes)
  return total / GiB, m.alias_size_in_bytes / GiB


def _xla_flops(compiled: Any, platform: str) -> Optional[float]:
  """XLA's own FLOP count of a compiled step (None when it gives none).

  Not on GPU: there cuBLAS/cuDNN custom calls are left out of the count.
  """
  if platform == 'gpu':
    return None
  try:
    cost = compiled.cost_analysis()
  except Exception:  # pylint: disable=broad-except
    return None
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  return float(cost['flops']) if cost and 'flops' in cost else None


def _time(fn, steps: int, warmup: int, repeats: int) -> list:
  """Seconds per step of `repeats` windows of `steps` calls, after `warmup`."""
  out = None
  for _ in range(warmup):
    out = fn()
  jax.block_until_ready(out)
  windows = []
  for _ in range(repeats):
    t = time.perf_counter()
    for _ in range(steps):
      out = fn()
    jax.block_until_ready(out)
    windows.append((time.perf_counter() - t) / steps)
  return windows


def _compare_timm(args: Any) -> dict:
  """Runs tools/bench_timm.py in its own process and parses its JSON line."""
  if not os.path.exists(TIMM_SCRIPT):
    return {'skipped': f'{TIMM_SCRIPT} not found: --compare=timm runs from a '
                       'checkout of the repository'}
  cmd = [sys.executable, TIMM_SCRIPT, f'--model={args.model}',
         f'--batch={args.batch}', f'--resolution={args.resolution}',
         f'--mode={args.mode}', f'--steps={args.steps}',
         f'--warmup={args.warmup}', f'--repeats={args.repeats}',
         f'--optimizer={args.optimizer}', f'--clip={args.clip}',
         f'--num_classes={args.num_classes}']
  proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
  lines = [l for l in proc.stdout.splitlines() if l.startswith('{')]
  if not lines:
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['']
    return {'error': f'exit {proc.returncode}: {tail[0][:300]}'}
  return json.loads(lines[-1])


def _batch(args: Any, seed: int) -> dict:
  """A host batch: images in [-1, 1] and one-hot labels, as the pipeline gives."""
  rng = np.random.default_rng(seed)
  images = rng.uniform(-1, 1, (args.batch, args.resolution, args.resolution,
                               3)).astype(np.float32)
  labels = np.eye(args.num_classes, dtype=np.float32)[
      rng.integers(0, args.num_classes, args.batch)]
  return {'image': images, 'label': labels}


def _check(args: Any, n_devices: int) -> None:
  """One-line errors for flag values that would otherwise fail inside JAX."""
  for key in ('batch', 'steps', 'repeats', 'resolution', 'num_classes',
              'accum_steps', 'profile_steps'):
    if getattr(args, key) < 1:
      raise ValueError(f'--{key}={getattr(args, key)} must be positive.')
  if args.warmup < 0:
    raise ValueError(f'--warmup={args.warmup} must be >= 0.')
  peaks.parse_peak(args.peak, '--peak')
  if args.batch % (args.accum_steps * n_devices):
    raise ValueError(
        f'--batch={args.batch} is not divisible by {n_devices} devices x '
        f'--accum_steps={args.accum_steps}; use a multiple of '
        f'{n_devices * args.accum_steps}.')
  patch = models.get_model_config(args.model).patches.size[0]
  if args.resolution % patch and 'resnet' not in models.get_model_config(
      args.model):
    raise ValueError(f'--resolution={args.resolution} is not divisible by '
                     f"{args.model}'s patch size {patch}.")


def run(args: Any) -> dict:
  """Benchmarks the configured step; returns every reported field."""
  devices = jax.devices()[:args.devices] if args.devices else jax.devices()
  if args.devices and args.devices > len(jax.devices()):
    raise ValueError(f'--devices={args.devices} but only {len(jax.devices())} '
                     'devices exist.')
  _check(args, len(devices))
  dtype = jnp.dtype(models.resolve_dtype(args.dtype)).name
  config = make_config(args)
  model = from_config.build(config, args.num_classes)
  mesh = sharding.make_mesh(config.mesh, devices)
  batch_sharding = sharding.batch_sharding(mesh)
  host = _batch(args, 0)
  res = {'model': args.model, 'mode': args.mode, 'batch': args.batch,
         'resolution': args.resolution, 'dtype': dtype,
         'devices': len(devices), 'device_kind': devices[0].device_kind,
         'jax': jax.__version__}
  if 'attention' in models.family_of(model).options:
    res['attention'] = attention_lib.resolve_implementation(
        args.attention, jnp.dtype(dtype),
        model.hidden_size // model.transformer['num_heads'])
  schedule = schedules.make(config)
  tx = optimizers.make(config, schedule)
  objective = objectives.make(config, model)
  image_shape = (1, args.resolution, args.resolution, 3)
  init_fn = lambda r: train_step.init_state(objective, tx, r, image_shape)  # noqa: E731
  abstract = jax.eval_shape(init_fn, jax.random.PRNGKey(0))
  state_sh = sharding.tree_shardings(abstract, mesh, config)
  state = jax.jit(init_fn, out_shardings=state_sh)(jax.random.PRNGKey(0))
  if args.mode == 'train':
    res['optimizer'] = args.optimizer
    res['objective'] = args.objective
    fn = train_step.jit_train_step(
        train_step.make_train_step(objective, tx, config.accum_steps, schedule),
        mesh, state_sh, donate=args.donate)
    params_or_state = state
  else:
    params_or_state = state.params
    del state
    fn = jax.jit(lambda p, b: model.apply({'params': p}, b['image'],
                                          train=False),
                 in_shardings=(state_sh.params, batch_sharding))
  batch = jax.device_put(host, batch_sharding)
  t = time.perf_counter()
  compiled = fn.lower(params_or_state, batch).compile()
  res['compile_s'] = time.perf_counter() - t
  res['compiled_mem_gib'], res['donated_gib'] = _compiled_memory(compiled)
  xla = _xla_flops(compiled, devices[0].platform)
  res['xla_gflops_per_image'] = (xla / args.batch * len(devices) / 1e9
                                 if xla else None)

  hosts = [host, _batch(args, 1)]
  holder = {'x': params_or_state, 'i': 0}

  def one_step():
    b = batch
    if args.input == 'host':
      holder['i'] += 1
      b = jax.device_put(hosts[holder['i'] % 2], batch_sharding)
    if args.mode == 'train':
      holder['x'], metrics = compiled(holder['x'], b)
      return metrics
    return compiled(holder['x'], b)

  windows = _time(one_step, args.steps, args.warmup, args.repeats)
  if args.profile_dir:
    # After timing, so the trace holds steady-state steps only.
    with jax.profiler.trace(args.profile_dir, create_perfetto_trace=True):
      jax.block_until_ready(
          [one_step() for _ in range(args.profile_steps)][-1])
    res['profile_dir'] = args.profile_dir
    res['profile'] = profiling.summarize(
        profiling.find_trace(args.profile_dir), args.profile_steps,
        hlo_text=compiled.as_text())
  sec = statistics.median(windows)
  res['step_ms'] = sec * 1e3
  res['step_ms_spread'] = (max(windows) - min(windows)) * 1e3
  res['img_s'] = args.batch / sec
  res['img_s_per_device'] = res['img_s'] / len(devices)
  res['peak_mem_gib'] = _memory(devices[0])
  if args.mode == 'train':  # the objective's own count (MAE encodes a quarter)
    per_image = objectives.train_flops_per_image(objective, args.resolution)
  else:
    per_image = flops.model_flops_per_image(args.model, args.resolution, train=False,
                                            num_classes=args.num_classes)
  res['gflops_per_image'] = per_image / 1e9
  achieved = res['img_s_per_device'] * per_image
  res['tflops_per_device'] = achieved / 1e12
  peak, how = peaks.resolve_peak(args.peak, dtype, devices[0])
  res['peak_tflops'] = peak / 1e12 if peak else None
  res['peak_source'] = how
  res['mfu'] = achieved / peak if peak else None
  spec = peaks.device_peak_flops(devices[0], dtype)
  res['mfu_datasheet'] = achieved / spec if spec else None
  return res


def _fmt(value: Any) -> str:
  if value is None:
    return 'n/a'
  if isinstance(value, float):
    return f'{value:.4g}' if abs(value) < 1e4 else f'{value:.0f}'
  return str(value)


def format_report(res: dict) -> str:
  """The human-readable block the command prints."""
  lines = [f'{k:22s} {_fmt(v)}' for k, v in res.items()
           if k not in ('timm', 'ratio_vs_timm', 'profile')]
  timm = res.get('timm')
  if timm is not None:
    if 'img_s' in timm:
      lines.append(f'{"timm_model":22s} {timm["timm_model"]} (torch '
                   f'{timm["torch"]}, timm {timm["timm"]}, bf16 autocast, '
                   'torch.compile)')
      lines.append(f'{"timm_img_s":22s} {timm["img_s"]:.1f}')
      lines.append(f'{"timm_step_ms":22s} {timm["step_ms"]:.2f}')
      lines.append(f'{"timm_compile_s":22s} {timm["compile_s"]:.1f}')
      lines.append(f'{"timm_peak_mem_gib":22s} {timm["peak_mem_gib"]:.1f}')
      lines.append(f'{"torch_peak_tflops":22s} {timm["torch_peak_tflops"]:.0f} '
                   '(torch 8192^3 bf16 matmul, same run)')
      lines.append(f'{"ratio_vs_timm":22s} {res["ratio_vs_timm"]:.3f}')
    else:
      lines.append(f'{"timm":22s} skipped: '
                   f'{timm.get("skipped") or timm.get("error")}')
  if 'profile' in res:
    lines.append(profiling.format_summary(res['profile'],
                                          step_ms=res.get('step_ms')))
  return '\n'.join(lines)


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flags, on `fv`."""
  d = dict(flag_values=fv)
  flags.DEFINE_string('model', 'ViT-B_16', 'Preset name.', **d)
  flags.DEFINE_integer('batch', 256, 'Global batch.', **d)
  flags.DEFINE_integer('resolution', 224, 'Image side in pixels.', **d)
  flags.DEFINE_enum('mode', 'train', list(MODES), 'Train step or inference.', **d)
  flags.DEFINE_integer('steps', 20, 'Steps per timed window.', **d)
  flags.DEFINE_integer('warmup', 3, 'Steps run before timing.', **d)
  flags.DEFINE_integer('repeats', 3, 'Timed windows; the median is reported.', **d)
  flags.DEFINE_enum('optimizer', 'adam', sorted(optimizers.OPTIMIZERS),
                    'Optimizer of the step (adam: pre-training recipe, sgd: '
                    'fine-tuning recipe).', **d)
  flags.DEFINE_float('clip', 1.0, 'Gradient clip norm (0 = off).', **d)
  flags.DEFINE_enum('objective', 'supervised', sorted(objectives.OBJECTIVES),
                    'Training objective of the step (mae: the encoder sees the '
                    'visible 25% of the patches; its decoder has the base '
                    "config's sizes unless --objective_options says).", **d)
  flags.DEFINE_list('objective_options', [], 'KEY=VALUE options of the objective '
                    '(config.objectives.<name>), e.g. decoder_depth=4,mask_ratio=0.5.',
                    **d)
  flags.DEFINE_integer('accum_steps', 1, 'Gradient accumulation steps.', **d)
  flags.DEFINE_integer('num_classes', 1000, 'Head width.', **d)
  flags.DEFINE_enum('dtype', 'auto', list(models.DTYPES),
                    'Compute dtype; params stay fp32 (auto: bf16 on GPU/TPU, fp32 '
                    'on CPU, as the trainer).', **d)
  flags.DEFINE_enum('attention', 'auto', list(attention_lib.IMPLEMENTATIONS),
                    'Attention kernel.', **d)
  flags.DEFINE_integer('pad_multiple', 8, 'cuDNN attention: pad tokens to an even '
                       'multiple of this.', **d)
  flags.DEFINE_enum('remat', 'none', list(vit_lib.REMAT_POLICIES),
                    'Rematerialisation policy of the blocks.', **d)
  flags.DEFINE_bool('scan_layers', False, 'lax.scan over the blocks.', **d)
  flags.DEFINE_enum('patch_embedding', 'conv', list(vit_lib.PATCH_EMBEDDINGS),
                    'Patch embedding as a strided conv or a matmul.', **d)
  flags.DEFINE_float('dropout', -1.0, "Dropout rate; -1 keeps the preset's.", **d)
  flags.DEFINE_bool('donate', True, 'Donate the train state to the step '
                    '(--nodonate to see what donation saves).', **d)
  flags.DEFINE_enum('input', 'device', ['device', 'host'],
                    'device: one resident batch; host: a host batch per step.', **d)
  flags.DEFINE_integer('devices', 0, 'Use the first N devices (0 = all), data '
                       'parallel.', **d)
  flags.DEFINE_string('peak', 'auto', 'auto (measure on GPU/CPU, datasheet on TPU) | '
                      'measure | table | a number in TFLOP/s.', **d)
  flags.DEFINE_enum('compare', '', ['', 'timm'], "timm: time timm's same model "
                    'first (needs torch, timm and CUDA).', **d)
  flags.DEFINE_string('json', '', 'Also write the fields here.', **d)
  flags.DEFINE_string('profile_dir', '', 'After timing, trace --profile_steps steps '
                      'with jax.profiler into this directory (TensorBoard/Perfetto).',
                      **d)
  flags.DEFINE_integer('profile_steps', 3, 'Steps traced with --profile_dir.', **d)


def _namespace(fv: flags.FlagValues) -> types.SimpleNamespace:
  return types.SimpleNamespace(**{name: fv[name].value for name in fv})


def parse_args(argv: Sequence[str]) -> types.SimpleNamespace:
  """The flags of a command line (without the program name), parsed on their own."""
  fv = flags.FlagValues()
  define_flags(fv)
  fv(['vit_jax.perf.benchmark'] + list(argv))
  return _namespace(fv)


def main(argv: Optional[Sequence[str]] = None) -> dict:
  """Runs the benchmark (argv: flags, or None for the parsed command line)."""
  try:
    args = parse_args(argv) if argv is not None else _namespace(flags.FLAGS)
  except flags.Error as e:
    print(f'vit_jax.perf.benchmark: error: {e}', file=sys.stderr)
    sys.exit(2)
  try:
    if args.json:  # checked before minutes of benchmarking, not after
      fileio.check_output(args.json, '--json')
    timm = _compare_timm(args) if args.compare == 'timm' else None
    res = run(args)
  except (ValueError, OSError) as e:
    print(f'vit_jax.perf.benchmark: error: {e}', file=sys.stderr)
    sys.exit(2)
  if timm is not None:
    res['timm'] = timm
    if 'img_s' in timm:
      res['ratio_vs_timm'] = res['img_s'] / timm['img_s']
  print(format_report(res), flush=True)
  if args.json:
    out = dict(res)
    if 'profile' in out:
      out['profile'] = profiling.as_jsonable(out['profile'])
    fileio.atomic_write(args.json, json.dumps(out, indent=1).encode())
  return res


if __name__ == '__main__':
  errors.exit_on_help(sys.argv, define_flags)
  define_flags()
  app.run(lambda argv: main(None) and None)
