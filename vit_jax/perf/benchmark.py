r"""Throughput and MFU of the trainer's own train step (or the eval forward pass).

  python -m vit_jax.perf.benchmark --config=quickstart --steps=5 --repeats=3 --compare=timm
  python -m vit_jax.perf.benchmark --model=ViT-B_16 --batch=256 --resolution=224 \
      --mode=train --optimizer=adam --steps=20 --compare=timm

Times exactly what the trainer runs: the model from the config (models.from_config),
the named objective (supervised, masked_patch, mae, dino with its multi-crop views),
optimizer and schedule, and train.step.make_train_step jitted with the trainer's mesh
shardings and state donation, on a synthetic batch resident on the devices (--input=host
feeds a fresh host batch each step instead). --config takes all of it from an experiment
config (a file or a shipped config's name); flags named on the command line override it.
Prints img/s, step time, compile time, peak device memory, analytic FLOPs (train = 3x
forward) and MFU against the peak it names (never above 1:
vit_jax.parallel.peaks.utilization), with progress lines on stderr. With --compare=timm
it times timm's VisionTransformer of the same dimensions (the repository's
tools/bench_timm.py, torch code, in --timm_python): on a GPU first, under torch.compile;
on CPU in eager float32 on the cores JAX uses, its windows alternated with ours; and
prints the ratio. Needs neither TensorFlow nor a dataset.
"""
import ast
import json
import os
import re
import statistics
import sys
import time
import types
from typing import Any, Callable, Optional, Sequence

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from vit_jax import configs
from vit_jax import errors
from vit_jax import fileio
from vit_jax import models
from vit_jax.configs import experiments
from vit_jax.configs import recipes
from vit_jax.data import catalog
from vit_jax.data import view_counts
from vit_jax.inference import engine
from vit_jax.models import attention as attention_lib
from vit_jax.models import flops
from vit_jax.models import fp8
from vit_jax.models import from_config
from vit_jax.models import mlp_kernel
from vit_jax.models import vit as vit_lib
from vit_jax.parallel import host_memory
from vit_jax.parallel import peaks
from vit_jax.parallel import sharding
from vit_jax.perf import profiling
from vit_jax.perf import timm_peer
from vit_jax.train import objectives
from vit_jax.train import optimizers
from vit_jax.train import schedules
from vit_jax.train import step as train_step

MODES = ('train', 'infer')
GiB = 2**30


# Flags that set a config key when a config is given only if named on the command line:
# flag -> (config key path, value transform).
_CONFIG_FLAGS = {
    'model': ('model_name',), 'batch': ('batch',), 'accum_steps': ('accum_steps',),
    'optimizer': ('optimizer',), 'clip': ('grad_clip_norm',), 'objective': ('objective',),
    'resolution': ('pp', 'crop'), 'num_classes': ('model', 'num_classes'),
    'dtype': ('model', 'dtype'), 'attention': ('model', 'attention'),
    'remat': ('model', 'remat'), 'pad_multiple': ('model', 'attention_pad_multiple'),
    'scan_layers': ('model', 'scan_layers'),
    'patch_embedding': ('model', 'patch_embedding'), 'dropout': ('model', 'dropout_rate'),
    'matmul': ('model', 'matmul'), 'fused_qkv': ('model', 'fused_qkv'),
    'mlp_kernel': ('model', 'mlp_kernel'), 'mlp_blocks': ('model', 'mlp_kernel_blocks'),
    'local_crops': ('pp', 'multicrop', 'local_crops'),
    'local_crop': ('pp', 'multicrop', 'local_crop'),
}


def _recipe_config(args: Any) -> Any:
  """Without --config: the base schema with the flags' recipe (pre-training or fine-tuning)."""
  c = configs.get_base_config()
  c.total_steps = 10**6
  c.warmup_steps = 10
  if args.optimizer == 'adam':  # pre-training recipe
    c.base_lr, c.weight_decay = 1e-3, 0.1
  else:  # fine-tuning recipe
    c.base_lr, c.weight_decay = 0.03, 0.0
  if args.objective == 'dino':  # its batches are multi-crop views: DINO's 2 + 8
    recipes.apply_dino_views(c)
  return c


def make_config(args: Any) -> Any:
  """The train config of the benchmarked step.

  With --config, the experiment file's config, where the flags named on the command line
  override; without it, the base schema with every flag's value (pre-training recipe
  for adam, fine-tuning for sgd).
  """
  if args.config:
    c = configs.load(experiments.resolve(args.config))
    given = set(args.given)
  else:
    c = _recipe_config(args)
    given = set(_CONFIG_FLAGS) | {'objective_options'}
  with c.unlocked():
    for flag, path in _CONFIG_FLAGS.items():
      if flag in given:
        node = c
        for key in path[:-1]:
          node = node[key]
        node[path[-1]] = getattr(args, flag)
    if 'objective_options' in given:
      c.objectives[c.objective].update(parse_options(args.objective_options))
    c.mesh.data, c.mesh.fsdp = -1, 1  # data parallel over the benchmarked devices
  return c


def settle(args: Any, c: Any) -> types.SimpleNamespace:
  """args with the values the config decided (batch, resolution, classes, optimizer, ...)."""
  num_classes = c.model.num_classes
  if num_classes is None or num_classes < 1:
    spec = catalog.DATASETS.get(c.dataset)
    num_classes = spec.num_classes if spec and spec.num_classes else args.num_classes
  out = dict(vars(args))
  out.update(model=c.model_name, batch=c.batch, accum_steps=c.accum_steps,
             optimizer=c.optimizer, clip=c.grad_clip_norm, objective=c.objective,
             resolution=c.pp.crop, num_classes=num_classes, dtype=c.model.dtype,
             attention=c.model.attention, matmul=c.model.get('matmul', 'default'),
             views=view_counts.counts(c.pp))
  return types.SimpleNamespace(**out)


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


def fp8_matmuls(hlo_text: str) -> int:
  """How many matmuls of a compiled program take float8 operands (cuBLASLt FP8 calls on GPU).

  0 where the backend rewrites none (on CPU XLA widens the float8 values to float32 first).
  """
  return sum(1 for line in hlo_text.splitlines()
             if ('custom-call' in line and 'matmul$f8' in line)
             or (re.search(r'= \S+ dot\(', line) and 'f8e' in line))


def _progress(message: str) -> None:
  """A progress line on stderr, so a long benchmark shows it is alive."""
  print(f'vit_jax.perf.benchmark: {message}', file=sys.stderr, flush=True)


def _time(fn, steps: int, warmup: int, repeats: int,
          peer: Optional[Callable[[int], Optional[float]]] = None) -> tuple[list, list]:
  """Seconds per step of `repeats` windows of `steps` calls, after `warmup`.

  With `peer` (a function timing the peer's window of n steps), each of our windows is
  followed by one of the peer's on the same cores, so load that comes and goes hits both
  alike; returns (our windows, the peer's windows).
  """
  out = None
  for _ in range(warmup):
    out = fn()
  jax.block_until_ready(out)
  windows, peer_windows = [], []
  for i in range(repeats):
    t = time.perf_counter()
    for _ in range(steps):
      out = fn()
    jax.block_until_ready(out)
    windows.append((time.perf_counter() - t) / steps)
    line = f'window {i + 1}/{repeats}: {windows[-1] * 1e3:.2f} ms/step'
    if peer is not None:
      sec = peer(steps)
      if sec is None:
        raise OSError('--compare=timm: the timm process ended during timing.')
      peer_windows.append(sec)
      line += f', timm {sec * 1e3:.2f} ms/step'
    _progress(line)
  return windows, peer_windows


def _batch(args: Any, seed: int) -> dict:
  """A host batch: images in [-1, 1] and one-hot labels, as the pipeline gives.

  Multi-crop configs (DINO) get 'image' [batch, global views, crop, crop, 3] and
  'local' [batch, local views, local crop, local crop, 3], as vit_jax.data.multicrop.
  """
  rng = np.random.default_rng(seed)
  n_global, n_local, local_crop = args.views
  lead = (args.batch,) if args.views == (1, 0, 0) else (args.batch, n_global)
  images = rng.uniform(-1, 1, lead + (args.resolution, args.resolution, 3))
  labels = np.eye(args.num_classes, dtype=np.float32)[
      rng.integers(0, args.num_classes, args.batch)]
  out = {'image': images.astype(np.float32), 'label': labels}
  if n_local:
    out['local'] = rng.uniform(-1, 1, (args.batch, n_local, local_crop, local_crop,
                                       3)).astype(np.float32)
  return out


def _check(args: Any) -> None:
  """One-line errors for flag values that would otherwise fail inside JAX."""
  for key in ('batch', 'steps', 'repeats', 'resolution', 'num_classes',
              'accum_steps', 'profile_steps'):
    if getattr(args, key) < 1:
      raise ValueError(f'--{key}={getattr(args, key)} must be positive.')
  if args.warmup < 0:
    raise ValueError(f'--warmup={args.warmup} must be >= 0.')
  peaks.parse_peak(args.peak, '--peak')


def _check_devices(args: Any, n_devices: int) -> None:
  """One-line error when the batch does not split over the devices and micro-batches."""
  if args.batch % (args.accum_steps * n_devices):
    raise ValueError(
        f'--batch={args.batch} is not divisible by {n_devices} devices x '
        f'--accum_steps={args.accum_steps}; use a multiple of '
        f'{n_devices * args.accum_steps}.')


def _check_model(args: Any, model: Any) -> None:
  """One-line error when the resolution does not split into the model's patches."""
  patches = getattr(model, 'patches', None)
  if patches is None or getattr(model, 'resnet', None):
    return  # a hybrid's patches tile the ResNet's features, not the pixels
  patch = tuple(patches['size'])[0]
  if args.resolution % patch:
    raise ValueError(f'--resolution={args.resolution} is not divisible by '
                     f"{args.model}'s patch size {patch}.")


def run(args: Any) -> dict:
  """Benchmarks the configured step (and its timm peer with --compare=timm)."""
  config = make_config(args)
  args = settle(args, config)
  _check(args)
  model = from_config.build(config, args.num_classes)
  _check_model(args, model)
  peer = None
  if args.compare == 'timm' and args.mode == 'train' and args.objective != 'supervised':
    raise ValueError(f'--compare=timm times a supervised step, not --objective='
                     f'{args.objective}: leave --compare out.')
  if args.compare == 'timm':
    # Before JAX claims a GPU: there the peer runs to the end before we start.
    peer = timm_peer.start(args.timm_python, model, args.resolution, args)
  try:
    return _run(args, config, model, peer)
  finally:
    if peer is not None:
      peer.close()


def new_state(config: Any, objective: objectives.Objective, tx: Any, resolution: int,
              mesh: jax.sharding.Mesh, seed: int = 0) -> tuple[Any, Any]:
  """(a new TrainState placed with the trainer's shardings, those shardings), TensorFlow-free."""
  image_shape = (1, resolution, resolution, 3)
  init_fn = lambda r: train_step.init_state(objective, tx, r, image_shape)  # noqa: E731
  shardings = sharding.tree_shardings(jax.eval_shape(init_fn, jax.random.PRNGKey(0)), mesh,
                                      config)
  return jax.jit(init_fn, out_shardings=shardings)(jax.random.PRNGKey(seed)), shardings


def _run(args: Any, config: Any, model: Any,
         peer: Optional[timm_peer.PeerProcess]) -> dict:
  """run() once the config, model and peer are settled."""
  devices = jax.devices()[:args.devices] if args.devices else jax.devices()
  if args.devices and args.devices > len(jax.devices()):
    raise ValueError(f'--devices={args.devices} but only {len(jax.devices())} '
                     'devices exist.')
  _check_devices(args, len(devices))
  dtype = jnp.dtype(models.resolve_dtype(args.dtype)).name
  mesh = sharding.make_mesh(config.mesh, devices)
  batch_sharding = sharding.batch_sharding(mesh)
  host = _batch(args, 0)
  res = {'model': args.model, 'mode': args.mode, 'batch': args.batch,
         'resolution': args.resolution, 'dtype': dtype,
         'devices': len(devices), 'device_kind': devices[0].device_kind,
         'jax': jax.__version__}
  if args.config:
    res['config'] = args.config
  if args.views != (1, 0, 0):
    res['views'] = '{} x {}px + {} x {}px'.format(args.views[0], args.resolution,
                                                 *args.views[1:])
  if 'attention' in models.family_of(model).options:
    res['attention'] = attention_lib.resolve_implementation(
        args.attention, jnp.dtype(dtype),
        model.hidden_size // model.transformer['num_heads'])
  schedule = schedules.make(config)
  tx = optimizers.make(config, schedule)
  objective = objectives.make(config, model)
  if args.mode == 'train':
    objectives.check_views(objective, config.pp)
  state, state_sh = new_state(config, objective, tx, args.resolution, mesh)
  ran = model  # the model the timed step runs
  if args.mode == 'train':
    res['optimizer'] = args.optimizer
    res['objective'] = args.objective
    fn = train_step.jit_train_step(
        train_step.make_train_step(objective, tx, config.accum_steps, schedule),
        mesh, state_sh, donate=args.donate)
    params_or_state = state
  elif args.matmul == 'fp8_delayed':
    # fp8_delayed inference scales by the histories training kept (no amax reductions).
    histories = state.extra.get(train_step.FP8_KEY, {})
    params_or_state = fp8.merge_histories(state.params, histories)
    del state
    fn = jax.jit(lambda p, b: model.apply({'params': p}, b['image'], train=False),
                 in_shardings=(fp8.merge_histories(
                     state_sh.params, state_sh.extra.get(train_step.FP8_KEY, {})),
                               batch_sharding))
  else:
    # The serving path predict and evaluate run: weights made ready once (cast, float8).
    ran = engine.inference_model(model, weights='fp8' if args.matmul == 'fp8' else 'default',
                                 fused_qkv=config.model.get('fused_qkv'))
    params_or_state = engine.prepare(ran, state.params,
                                     (1, args.resolution, args.resolution, 3))
    del state
    forward = engine.forward(ran)
    fn = jax.jit(lambda p, b: forward(p, b['image']),
                 in_shardings=(None, batch_sharding))
  batch = jax.device_put(host, batch_sharding)
  t = time.perf_counter()
  compiled = fn.lower(params_or_state, batch).compile()
  res['compile_s'] = time.perf_counter() - t
  res['compiled_mem_gib'], res['donated_gib'] = _compiled_memory(compiled)
  if 'fused_qkv' in models.family_of(model).options:  # what the step ran: None resolved
    res['fused_qkv'] = vit_lib.resolve_fused_qkv(ran.fused_qkv, train=args.mode == 'train')
  if config.model.get('mlp_kernel', 'xla') != 'xla':
    res['mlp_kernel'] = config.model.mlp_kernel
    res['mlp_blocks'] = config.model.get('mlp_kernel_blocks', '')
  # The compiled step's text (a few MB for ViT-B on a GPU), read once for what needs it.
  hlo_text = compiled.as_text() if args.matmul != 'default' or args.profile_dir else ''
  if args.matmul != 'default':
    res['matmul'] = args.matmul
    res['fp8_matmuls'] = fp8_matmuls(hlo_text)
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

  _progress(f'compiled in {res["compile_s"]:.1f} s; timing {args.repeats} windows of '
            f'{args.steps} steps after {args.warmup} warm-up steps'
            + (', each followed by a timm window' if peer and peer.serving else ''))
  windows, peer_windows = _time(one_step, args.steps, args.warmup, args.repeats,
                                peer.window if peer and peer.serving else None)
  if args.profile_dir:
    # After timing, so the trace holds steady-state steps only.
    with jax.profiler.trace(args.profile_dir, create_perfetto_trace=True):
      jax.block_until_ready(
          [one_step() for _ in range(args.profile_steps)][-1])
    res['profile_dir'] = args.profile_dir
    # Beside the trace, so it can be summarised again where it is copied to.
    fileio.atomic_write(os.path.join(args.profile_dir, profiling.HLO_FILE), hlo_text.encode())
    res['profile'] = profiling.summarize(
        profiling.find_trace(args.profile_dir), args.profile_steps, hlo_text=hlo_text)
  sec = statistics.median(windows)
  res['step_ms'] = sec * 1e3
  res['step_ms_spread'] = (max(windows) - min(windows)) * 1e3
  res['img_s'] = args.batch / sec
  res['img_s_per_device'] = res['img_s'] / len(devices)
  res['peak_mem_gib'] = _memory(devices[0])
  if args.mode == 'train':  # the objective's own count (MAE encodes a quarter)
    per_image = objectives.train_flops_per_image(objective, args.resolution,
                                                 args.views)
  else:
    per_image = flops.model_flops_per_image(model, args.resolution, train=False,
                                            num_classes=args.num_classes)
  res['gflops_per_image'] = per_image / 1e9
  achieved = res['img_s_per_device'] * per_image
  res['tflops_per_device'] = achieved / 1e12
  peak, how = peaks.resolve_peak(args.peak, dtype, devices[0])
  res['mfu'] = None
  if peak:
    res['mfu'], peak, raised = peaks.utilization(achieved, peak)
    if raised:
      how += '; the step ran faster, so raised to its rate'
  res['peak_tflops'] = peak / 1e12 if peak else None
  res['peak_source'] = how
  spec = peaks.device_peak_flops(devices[0], dtype)
  res['mfu_datasheet'] = achieved / spec if spec else None
  if peer is not None:
    res['timm'] = _peer_result(peer, args.batch, peer_windows)
    if 'img_s' in res['timm']:
      res['ratio_vs_timm'] = res['img_s'] / res['timm']['img_s']
  return res


def _peer_result(peer: timm_peer.PeerProcess, batch: int, windows: list) -> dict:
  """The peer's fields: its own finished run (GPU), or our alternated windows of it (CPU)."""
  out = dict(peer.info)
  if not out.pop('serving', False):
    return out
  sec = statistics.median(windows)
  out.update(img_s=batch / sec, step_ms=sec * 1e3,
             step_ms_spread=(max(windows) - min(windows)) * 1e3)
  return out


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
      how = ('bf16 autocast, torch.compile' if timm.get('compiled') else
             f'{timm.get("dtype", "float32")}, eager, {timm.get("threads")} threads, '
             'windows alternated with ours')
      lines.append(f'{"timm_model":22s} {timm["timm_model"]}')
      lines.append(f'{"timm_run":22s} torch {timm["torch"]}, timm {timm["timm"]}, '
                   f'{timm.get("device", "cuda")}, {how}')
      lines.append(f'{"timm_params":22s} {timm.get("params", "n/a")}')
      lines.append(f'{"timm_img_s":22s} {timm["img_s"]:.1f}')
      lines.append(f'{"timm_step_ms":22s} {timm["step_ms"]:.2f}')
      if 'step_ms_spread' in timm:
        lines.append(f'{"timm_step_ms_spread":22s} {timm["step_ms_spread"]:.2f}')
      lines.append(f'{"timm_compile_s":22s} {timm["compile_s"]:.1f}')
      if 'peak_mem_gib' in timm:
        lines.append(f'{"timm_peak_mem_gib":22s} {timm["peak_mem_gib"]:.1f}')
      if 'torch_peak_tflops' in timm:
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
  flags.DEFINE_string('config', '', "An experiment config (configs/FILE.py[:ARGS] or a "
                      "shipped config's name, e.g. quickstart): the step's model, batch, "
                      'resolution (pp.crop), optimizer, clip, dtype, objective and classes '
                      'come from it; the flags named on the command line override it.', **d)
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
  flags.DEFINE_integer('local_crops', 8, 'DINO: local views per image (2 global views at '
                       '--resolution, as the official recipe).', **d)
  flags.DEFINE_integer('local_crop', 96, 'DINO: side of the local views in pixels.', **d)
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
  flags.DEFINE_enum('matmul', 'default', list(fp8.MATMULS), "The blocks' "
                    'projections: default (dtype), fp8 (float8 scaled by each operand) or '
                    'fp8_delayed (float8 scaled by amax histories; Hopper GPUs).', **d)
  flags.DEFINE_bool('fused_qkv', None, 'Query, key and value as one matmul '
                    '(--nofused_qkv: three, each in the layout attention reads); '
                    'unset: the faster for the backend and mode.', **d)
  flags.DEFINE_enum('mlp_kernel', 'xla', list(mlp_kernel.KERNELS), "The MLP: xla, or "
                    'pallas (bias + GELU and their gradients inside the matmuls).', **d)
  flags.DEFINE_string('mlp_blocks', '', "--mlp_kernel=pallas tiles 'm,n,k,num_warps,"
                      "num_stages' ('': the default; tools/dev/mlp_kernel_bench.py times "
                      'them).', **d)
  flags.DEFINE_float('dropout', -1.0, "Dropout rate; -1 keeps the preset's.", **d)
  flags.DEFINE_bool('donate', True, 'Donate the train state to the step '
                    '(--nodonate to see what donation saves).', **d)
  flags.DEFINE_enum('input', 'device', ['device', 'host'],
                    'device: one resident batch; host: a host batch per step.', **d)
  flags.DEFINE_integer('devices', 0, 'Use the first N devices (0 = all), data '
                       'parallel.', **d)
  flags.DEFINE_string('peak', 'auto', 'auto (measure on GPU/CPU, datasheet on TPU) | '
                      'measure | table | a number in TFLOP/s.', **d)
  flags.DEFINE_enum('compare', '', ['', 'timm'], "timm: time timm's VisionTransformer "
                    'of the same dimensions (tools/bench_timm.py in --timm_python): on a '
                    'GPU first, under torch.compile; on CPU eager float32 with the cores '
                    'JAX uses, its windows alternated with ours.', **d)
  flags.DEFINE_string('timm_python', '', 'Python with torch and timm for --compare=timm '
                      '(default: this one).', **d)
  flags.DEFINE_string('json', '', 'Also write the fields here.', **d)
  flags.DEFINE_string('profile_dir', '', 'After timing, trace --profile_steps steps '
                      'with jax.profiler into this directory (TensorBoard/Perfetto).',
                      **d)
  flags.DEFINE_integer('profile_steps', 3, 'Steps traced with --profile_dir.', **d)


def _namespace(fv: flags.FlagValues) -> types.SimpleNamespace:
  """The flags' values, and in `given` the names set on the command line."""
  names = [name for name in fv if fv[name].name == name]
  out = types.SimpleNamespace(**{name: fv[name].value for name in names})
  out.given = tuple(name for name in names if fv[name].present)
  return out


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
    res = run(args)
  except (ValueError, OSError) as e:
    print(f'vit_jax.perf.benchmark: error: {e}', file=sys.stderr)
    sys.exit(2)
  print(format_report(res), flush=True)
  if args.json:
    out = dict(res)
    if 'profile' in out:
      out['profile'] = profiling.as_jsonable(out['profile'])
    fileio.atomic_write(args.json, json.dumps(out, indent=1).encode())
  return res


def _main(unused_argv) -> None:
  """The command: jax's start-up INFO lines (e.g. no TPU found) are not the benchmark's."""
  logging.set_verbosity(logging.WARNING)
  main(None)


if __name__ == '__main__':
  errors.exit_on_help(sys.argv, define_flags)
  errors.skip_final_gc()
  define_flags()
  host_memory.retain_on_cpu()  # as vit_jax.main: the step's temporaries stay on the heap
  app.run(_main)
