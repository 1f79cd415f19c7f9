"""The sharded trainer: one code path for pre-training and fine-tuning on 1..N hosts."""
import json
import logging
import os
import signal
import threading
import time
from typing import Any, Optional

from etils import epath
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax import checkpoint
from vit_jax import checkpointing
from vit_jax import flops
from vit_jax import input_pipeline
from vit_jax import metrics as metrics_lib
from vit_jax import models
from vit_jax import optim
from vit_jax import sharding
from vit_jax import train_step as train_step_lib

PARAMS_FILE = 'params.npz'
CONFIG_FILE = 'config.json'
PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM, what a scheduler expects

# Model fields whose config value means "keep the preset's".
_KEEP = {'num_classes': -1, 'representation_size': -1, 'dropout_rate': -1.0}
_VIT_ONLY = {'attention': 'auto', 'remat': 'none', 'stochastic_depth': 0.0,
             'head_bias_init': 0.0, 'scan_layers': False,
             'attention_pad_multiple': 8, 'patch_embedding': 'conv'}


class Preempted(Exception):
  """Raised after a preemption signal once a checkpoint is safely on disk."""


class NonFiniteError(RuntimeError):
  """Raised when the loss or the gradients stop being finite."""


def model_overrides(config: ml_collections.ConfigDict,
                    num_classes: int) -> dict:
  """get_model keyword overrides from config.model (sentinels dropped)."""
  out = {}
  is_mixer = models.is_mixer(models.get_model_config(config.model_name))
  for key, value in config.model.to_dict().items():
    if key in _KEEP and value == _KEEP[key]:
      continue
    if is_mixer and key in _VIT_ONLY and value == _VIT_ONLY[key]:
      continue
    if key == 'representation_size':
      value = value or None
    out[key] = value
  out['num_classes'] = out.get('num_classes', num_classes)
  return out


def model_fields(model) -> dict:
  """The architecture fields of a built model (what checkpoint/flops tools read)."""
  names = ('hidden_size', 'patches', 'transformer', 'resnet', 'classifier',
           'representation_size', 'num_classes', 'hidden_dim', 'num_blocks',
           'tokens_mlp_dim', 'channels_mlp_dim')
  return {n: getattr(model, n) for n in names if hasattr(model, n)}


def build_model(config: ml_collections.ConfigDict, num_classes: int):
  """The flax module the config describes."""
  return models.get_model(config.model_name,
                          **model_overrides(config, num_classes))


def pretrained_file(config: ml_collections.ConfigDict) -> str:
  """The .npz to start from: pretrained_path, or pretrained_dir/MODEL.npz ('' = none)."""
  if config.pretrained_path:
    return config.pretrained_path
  if config.get('pretrained_dir'):
    return os.path.join(config.pretrained_dir, f'{config.model_name}.npz')
  return ''


def check_config(config: ml_collections.ConfigDict, mesh) -> None:
  """Catches batch/device mismatches before anything is compiled or written."""
  batch_devices = mesh.size
  for key in ('batch', 'batch_eval', 'accum_steps', 'total_steps'):
    if config[key] < 1:
      raise ValueError(f'config.{key}={config[key]} must be positive.')
  if config.peak_tflops < 0:
    raise ValueError(f'config.peak_tflops={config.peak_tflops} must be >= 0 '
                     '(0 = measured on GPU, datasheet on TPU).')
  if config.batch % config.accum_steps:
    raise ValueError(f'config.batch={config.batch} is not divisible by '
                     f'config.accum_steps={config.accum_steps}.')
  micro = config.batch // config.accum_steps
  if micro % batch_devices:
    raise ValueError(
        f'config.batch={config.batch} / accum_steps={config.accum_steps} = '
        f'{micro} is not divisible by the {batch_devices} devices; use a batch '
        f'that is a multiple of {batch_devices * config.accum_steps}.')
  if config.batch_eval % batch_devices:
    raise ValueError(f'config.batch_eval={config.batch_eval} is not divisible '
                     f'by the {batch_devices} devices.')


def prepare_workdir(workdir: str) -> None:
  """Creates the workdir and proves it is writable, with a one-line error if not."""
  probe = epath.Path(workdir, f'.write_probe_{jax.process_index()}')
  try:
    epath.Path(workdir).mkdir(parents=True, exist_ok=True)
    probe.write_text('ok')
    probe.unlink()
  except Exception as e:  # pylint: disable=broad-except  (OSError, GCS errors)
    reason = getattr(e, 'strerror', None) or str(e).splitlines()[0][:200]
    raise ValueError(f'--workdir={workdir} is not writable ({reason}); '
                     'choose a directory you can write to.') from None


def _to_host(tree: Any) -> Any:
  """Fetches a possibly sharded pytree to numpy on every process."""
  if all(x.is_fully_addressable for x in jax.tree.leaves(tree)):
    return jax.device_get(tree)
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  return multihost_utils.process_allgather(tree, tiled=True)


class StepTimer:
  """Seconds spent on training steps alone, between the loop's sync points.

  start() after the first (compiling) step; step() per later step; pause()
  and resume() around evaluation, extras and checkpoints; window() at a sync
  point returns (steps, seconds) since the previous window and starts anew.
  """

  def __init__(self, clock=time.perf_counter):
    self._clock = clock
    self._since = None
    self._seconds = 0.0
    self._steps = 0

  def start(self) -> None:
    """Starts the clock with no steps counted."""
    self._since, self._seconds, self._steps = self._clock(), 0.0, 0

  def step(self) -> None:
    """Counts one more timed step."""
    self._steps += 1

  def pause(self) -> None:
    """Stops the clock (the steps before this point are finished)."""
    if self._since is not None:
      self._seconds += self._clock() - self._since
      self._since = None

  def resume(self) -> None:
    """Restarts the clock after a pause."""
    if self._since is None:
      self._since = self._clock()

  def window(self) -> tuple[int, float]:
    """(steps, step seconds) since the last window; call when steps are done."""
    running = self._since is not None
    self.pause()
    out = (self._steps, self._seconds)
    self._seconds, self._steps = 0.0, 0
    if running:
      self.resume()
    return out


class _SignalFlag:
  """Records SIGTERM so the loop can save a checkpoint at the next step."""

  def __init__(self):
    self.raised = False
    self._previous = None

  def __enter__(self):
    # With several processes JAX's own preemption notifier handles SIGTERM and
    # orbax's sync point makes every host save the same step.
    if (jax.process_count() == 1 and
        threading.current_thread() is threading.main_thread()):
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def _handle(self, signum, frame):
    del signum, frame
    logging.warning('SIGTERM received: saving a checkpoint at the next step.')
    self.raised = True

  def __exit__(self, *exc):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)


def evaluate(eval_fn, params, eval_data) -> dict:
  """Runs one full pass over the eval split; every example counted once."""
  totals = None
  for batch in eval_data:
    out = eval_fn(params, batch)
    totals = out if totals is None else jax.tree.map(jnp.add, totals, out)
  totals = jax.device_get(totals)
  count = float(totals['count'])
  return {'accuracy_test': float(totals['correct']) / max(count, 1.0),
          'loss_test': float(totals['loss']) / max(count, 1.0),
          'eval_examples': count}


def _format_eta(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       devices: Optional[list] = None) -> dict:
  """Trains (resuming from workdir if it holds checkpoints) and returns final metrics.

  `devices` restricts the mesh to some of the local devices (tests, notebooks).
  """
  mesh = sharding.make_mesh(config.mesh, devices)
  check_config(config, mesh)  # before anything is written
  prepare_workdir(workdir)
  info = input_pipeline.get_dataset_info(config)
  model = build_model(config, info.num_classes)
  schedule = optim.make_schedule(config)
  tx = optim.make_optimizer(config)
  res = config.pp.crop
  image_shape = (1, res, res, 3)

  rng = jax.random.PRNGKey(config.seed)
  init_fn = lambda r: train_step_lib.init_state(model, tx, r, image_shape)  # noqa: E731
  abstract = jax.eval_shape(init_fn, rng)
  state_shardings = sharding.tree_shardings(abstract, mesh, config)
  abstract = jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      abstract, state_shardings)

  ckpt = checkpointing.StateCheckpointer(workdir, config.keep_checkpoints)
  writer = metrics_lib.make_writer(workdir)
  start_step = ckpt.latest_step()
  if start_step is not None:
    logging.info('Resuming from %s/%d.', ckpt.directory, start_step)
    state = ckpt.restore(start_step, abstract)
  else:
    start_step = 0
    state = jax.jit(init_fn, out_shardings=state_shardings)(rng)
    path = pretrained_file(config)
    if path:
      state = _load_pretrained_into(state, path, model, state_shardings, tx)
    if jax.process_index() == 0:
      epath.Path(workdir, CONFIG_FILE).write_text(
          config.to_json_best_effort(indent=2))

  n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
  logging.info('%s: %s parameters; %s: %d train / %d eval examples, %d '
               'classes; mesh %s; batch %d (accum %d); steps %d..%d.',
               config.model_name, f'{n_params:,}', info.name, info.num_train,
               info.num_eval, info.num_classes, dict(mesh.shape), config.batch,
               config.accum_steps, start_step, config.total_steps)
  step_fn = train_step_lib.jit_train_step(
      train_step_lib.make_train_step(model, tx, config, schedule), mesh,
      state_shardings)
  eval_fn = jax.jit(sharding.with_activation_constraints(
      train_step_lib.make_eval_step(model, config.loss), mesh),
                    in_shardings=(state_shardings.params,
                                  sharding.batch_sharding(mesh)))
  eval_data = input_pipeline.make_eval_iterator(config, mesh)
  hooks = _Hooks(config, model, mesh, writer, eval_data)

  flops_per_image = flops.model_flops_per_image(model_fields(model), res,
                                                train=True)
  # The benchmark's rule (flops.resolve_peak), so the two MFUs compare.
  peak, peak_source = flops.resolve_peak(
      config.peak_tflops or 'auto',
      jnp.dtype(models.resolve_dtype(config.model.dtype)).name,
      jax.local_devices()[0])
  if peak:
    logging.info('MFU is against %.1f TFLOP/s per device (%s).', peak / 1e12,
                 peak_source)
  total = config.total_steps
  final = {}
  with _SignalFlag() as sigterm:
    train_iter = input_pipeline.make_train_iterator(config, mesh,
                                                    start_step=start_step)
    pending = []  # device metrics since the last log line
    timer = StepTimer()
    t0 = None  # wall clock after the first step, for the ETA
    for step in range(start_step + 1, total + 1):
      batch = next(train_iter)
      state, step_metrics = step_fn(state, batch)
      pending.append(step_metrics)
      if t0 is None:  # exclude compilation from the throughput
        jax.block_until_ready(step_metrics)
        t0 = time.time()
        timer.start()
      else:
        timer.step()
      is_last = step == total
      if step % config.log_every == 0 or is_last:
        host = jax.device_get(pending)
        pending = []
        _check_finite(host, step - len(host) + 1, ckpt)
        scalars = {k: float(np.mean([m[k] for m in host])) for k in host[0]}
        scalars['learning_rate'] = float(host[-1]['learning_rate'])
        steps_timed, seconds = timer.window()
        if steps_timed and seconds > 0:
          img_sec = config.batch * steps_timed / seconds
          scalars['img_sec_core'] = img_sec / jax.device_count()
          if peak:
            scalars['mfu'] = img_sec * flops_per_image / (
                peak * jax.device_count())
        writer.write_scalars(step, scalars)
        done = step - start_step - 1
        eta = (time.time() - t0) / max(done, 1) * (total - step)
        logging.info('step %d/%d (%.1f%%) loss %.4f lr %.3g%s ETA %s', step,
                     total, 100 * step / total, scalars['train_loss'],
                     scalars['learning_rate'],
                     f" {scalars['img_sec_core']:.1f} img/s/core"
                     if 'img_sec_core' in scalars else '', _format_eta(eta))
      eval_due = (config.eval_every and step % config.eval_every == 0
                  ) or is_last
      saving = config.checkpoint_every and step % config.checkpoint_every == 0
      # Evaluation, extras and checkpoints stay out of img/s and mfu: wait
      # for the steps in flight (these need the state anyway), stop the clock.
      paused = eval_due or saving or hooks.due(step, is_last)
      if paused:
        jax.block_until_ready(state)
        timer.pause()
      if eval_due:
        final = evaluate(eval_fn, state.params, eval_data)
        writer.write_scalars(step, {k: v for k, v in final.items()
                                    if k != 'eval_examples'})
        logging.info('step %d: accuracy_test %.4f loss_test %.4f (%d examples)',
                     step, final['accuracy_test'], final['loss_test'],
                     final['eval_examples'])
      hooks.after_step(step, state, is_last)
      preempted = sigterm.raised or ckpt.reached_preemption(step)
      if saving or is_last or preempted:
        if pending:  # never checkpoint a state that went non-finite
          host = jax.device_get(pending)
          _check_finite(host, step - len(host) + 1, ckpt)
        ckpt.save(step, state, force=preempted)
      if paused:
        timer.resume()
      if preempted:
        ckpt.close()
        writer.flush()
        raise Preempted(f'Preempted at step {step}: checkpoint saved in '
                        f'{ckpt.directory}; run the same command again to '
                        'resume.')
  ckpt.close()
  params = _to_host(state.params)
  if jax.process_index() == 0:
    checkpoint.save(params, os.path.join(workdir, PARAMS_FILE))
  writer.flush()
  final['step'] = total
  return final


def _check_finite(host_metrics: list, first_step: int,
                  ckpt: checkpointing.StateCheckpointer) -> None:
  """Stops the run at the first step whose loss or gradient norm is NaN/Inf."""
  for i, m in enumerate(host_metrics):
    if not (np.isfinite(m['train_loss']) and np.isfinite(m['grad_norm'])):
      ckpt.close()
      last = ckpt.latest_step()
      raise NonFiniteError(
          f'Non-finite loss ({m["train_loss"]}) or gradient norm '
          f'({m["grad_norm"]}) at step {first_step + i}; stopped. The last good '
          f'checkpoint is step {last} in {ckpt.directory}: lower base_lr or '
          'check the data.')


def _load_pretrained_into(state, path: str, model, state_shardings, tx):
  """Replaces freshly initialised parameters by a published/exported .npz."""
  init_params = _to_host(state.params)
  params = checkpoint.load_pretrained(pretrained_path=path,
                                      init_params=init_params,
                                      model_config=model_fields(model))
  params = jax.device_put(params, state_shardings.params)
  opt_state = jax.jit(tx.init, out_shardings=state_shardings.opt_state)(params)
  logging.info('Initialised parameters from %s.', path)
  return state.replace(params=params, opt_state=opt_state)


class _Hooks:
  """Periodic extras: few-shot evaluation and TensorBoard images."""

  def __init__(self, config, model, mesh, writer, eval_data):
    self._config, self._writer = config, writer
    self._fewshot = None
    if config.fewshot.every and config.fewshot.datasets:
      from vit_jax import fewshot  # pylint: disable=g-import-not-at-top
      self._fewshot = fewshot.FewShotEvaluator(config, model, mesh)
    self._model = model
    self._eval_data = eval_data

  def _fewshot_due(self, step: int, is_last: bool) -> bool:
    return bool(self._fewshot) and (
        step % self._config.fewshot.every == 0 or is_last)

  def _images_due(self, step: int, is_last: bool) -> bool:
    cfg = self._config
    return bool(cfg.log_images and cfg.eval_every and (
        step % cfg.eval_every == 0 or is_last) and jax.process_index() == 0)

  def due(self, step: int, is_last: bool) -> bool:
    """Whether after_step will do any work at this step."""
    return self._fewshot_due(step, is_last) or self._images_due(step, is_last)

  def after_step(self, step: int, state, is_last: bool) -> None:
    if self._fewshot_due(step, is_last):
      results = self._fewshot.run(state.params)
      self._writer.write_scalars(step, results)
      logging.info('step %d: %s', step, json.dumps(results))
    if self._images_due(step, is_last):
      from vit_jax import visualize  # pylint: disable=g-import-not-at-top
      params = _to_host(state.params)
      sample = next(iter(self._eval_data))['image']
      local = np.asarray(sample.addressable_shards[0].data)[:4]
      images = visualize.summary_images(self._model, params, local)
      self._writer.write_images(step, images)
