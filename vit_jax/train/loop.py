"""The training loop: one code path for pre-training and fine-tuning on 1..N hosts.

`train_and_evaluate(config, workdir)` checks the whole config, creates (or resumes) the
sharded train state, runs the jitted step over the input stream and, each at its
cadence, logs, evaluates (config.evals), checkpoints, and at the end exports params.npz
(plus <objective>_params.npz for what a self-supervised objective trains beside the model;
DINO's params.npz is its teacher's backbone, dino_params.npz the two heads).
A finished run started again returns the final metrics it recorded; a run that fails
before its first step leaves the workdir as it found it (vit_jax.train.workdir).
"""
import contextlib
import logging
import os
import signal
import time
from typing import Any, Callable, Optional

from etils import epath
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax import checkpoint
from vit_jax import evaluators
from vit_jax import fileio
from vit_jax import models
from vit_jax import rundir
from vit_jax.data import pipeline
from vit_jax.data import view_counts
from vit_jax.models import families
from vit_jax.models import naming
from vit_jax.parallel import peaks
from vit_jax.parallel import sharding
from vit_jax.train import checkpointer
from vit_jax.train import ema
from vit_jax.train import layer_decay
from vit_jax.train import objectives
from vit_jax.train import precheck
from vit_jax.train import preemption
from vit_jax.train import resume
from vit_jax.train import step as step_lib
from vit_jax.train import timing
from vit_jax.train import validate
from vit_jax.train import workdir as workdir_lib
from vit_jax.train import writers

CONFIG_FILE = rundir.CONFIG_FILE


class NonFiniteError(RuntimeError):
  """Raised when the loss or the gradients stop being finite."""


class WriteFault(OSError):
  """The run could not write to its workdir (full disk, size limit, rights); nothing was lost."""

  def __init__(self, problem: str):
    self.problem = problem  # what happened and what is intact, without what to do
    super().__init__(f'{problem}; make room, then run the same command again to resume.')


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       devices: Optional[list] = None) -> dict:
  """Trains (resuming from workdir if it holds checkpoints) and returns final metrics.

  A workdir whose run is finished is left as it is: its recorded final metrics come back.
  `devices` restricts the mesh to some of the local devices (tests, notebooks).
  """
  mesh = sharding.make_mesh(config.mesh, devices)
  built = validate.validate(config, mesh)  # before anything is written
  changes = resume.check(config, workdir)
  info, model, objective = built.info, built.model, built.objective
  schedule, tx = built.schedule, built.tx
  with workdir_lib.UndoUntilFirstStep(workdir) as undo:
    workdir_lib.prepare(workdir)
    ckpt = checkpointer.StateCheckpointer(workdir, config.keep_checkpoints,
                                          verify=config.checkpoint_verify)
    try:
      # Run again as it was: nothing to do. A changed config is checked and recorded.
      if not changes.fields and finished(ckpt, workdir, config.total_steps):
        return final_metrics(workdir, config.total_steps)
      result = _train(config, workdir, mesh, info, model, objective, schedule, tx, ckpt,
                      changes, undo.started)
      # The last save may still be writing: its failure is this run's too, told as one.
      ckpt.close()
      return result
    except Exception as e:  # pylint: disable=broad-except  (orbax, TF and OS errors alike)
      fault = fileio.write_fault(e, workdir)
      if fault is None:
        raise
      ckpt.close_after_fault()
      raise WriteFault(f'Could not write to {workdir}: {fault}; {ckpt.last_good()} and '
                       'nothing half-written is left') from e
    finally:
      ckpt.close()  # also on errors: orbax's threads must not outlive the run


def finished(ckpt: checkpointer.StateCheckpointer, workdir: str, total_steps: int) -> bool:
  """Whether workdir holds a completed run: the last step checkpointed, params.npz written."""
  return (ckpt.latest_step() == total_steps and
          epath.Path(workdir, rundir.PARAMS_FILE).exists())


def final_metrics(workdir: str, total_steps: int) -> dict:
  """The metrics a finished run wrote at its last step (from metrics.jsonl), logged."""
  try:
    records = writers.read_metrics(workdir)
  except (OSError, ValueError):  # a missing or damaged metrics.jsonl: no numbers to show
    records = []
  final = {}
  for record in records:
    if record.get('step') == total_steps:
      final.update(record)
  logging.info('%s holds a finished run (step %d of %d, %s written): nothing to do. '
               'Final metrics: %s. To go on: %s; or use another --workdir.', workdir,
               total_steps, total_steps, rundir.PARAMS_FILE,
               writers.format_scalars(final) or 'none recorded', resume.TRAIN_ON)
  return {**final, 'step': total_steps}


def _train(config, workdir, mesh, info, model, objective, schedule, tx, ckpt,
           changes, started) -> dict:
  """The loop of train_and_evaluate, from the initial state to params.npz."""
  run_config = resolved_config(config, info.num_classes)  # what config.json records
  objective = objective.on_mesh(mesh)  # its constants (a frozen teacher) placed once
  state, shardings, start = _initial_state(run_config, mesh, objective, tx, ckpt)
  step_fn = jitted_step(config, objective, tx, schedule, mesh, shardings)
  writer = writers.make_writer(workdir)
  evals = evaluators.create(config, evaluators.Context(
      config, model, mesh, objective.example_loss))
  monitor = _Monitor(config, objective, writer, ckpt)
  _log_start(config, info, mesh, state, start, model)
  final = {}
  with preemption.SignalFlag() as stop:
    batches = pipeline.make_train_iterator(config, mesh, start_step=start)
    for step in range(start + 1, config.total_steps + 1):
      state, metrics = step_fn(state, next(batches))
      is_last = step == config.total_steps
      monitor.after_step(step, metrics, is_last)
      if step == start + 1:  # the run has begun: its config is recorded
        _record_config(run_config, workdir, changes, start)
        started()
      due = [e for e in evals if e.due(step, is_last)]
      if due:
        with monitor.paused(state):  # evaluation and checkpoints stay out of img/s
          for e in due:
            final.update(_evaluate(e, objectives.result_params(
                objective, state.params, state.extra), step, writer))
            if ema.enabled(config) and config.ema_eval:
              final.update(_evaluate(e, objective.model_params(ema.params_of(state.extra)),
                                     step, writer, suffix=ema.SUFFIX))
      preempted = stop.raised or ckpt.reached_preemption(step)
      if is_last or preempted or (config.checkpoint_every and
                                  step % config.checkpoint_every == 0):
        with monitor.paused(state):
          monitor.check_finite(step)  # never checkpoint a non-finite state
          ckpt.save(step, state, force=preempted)
      if preempted:
        ckpt.close()
        writer.flush()
        raise preemption.Preempted(step, ckpt.directory,
                                   stop.signum or signal.SIGTERM)
    batches.close()  # the input pipeline's threads stop here, not whenever it is collected
  if start == config.total_steps:  # stopped while exporting: only the export is left
    _record_config(run_config, workdir, changes, start)
    started()
  # The end's waits are on the disk; the line says which one a slow end spent its time on.
  t0 = time.time()
  ckpt.close()
  t1 = time.time()
  # The model's parameters (DINO: its teacher's) in the published layout.
  _export(objectives.result_params(objective, state.params, state.extra), workdir,
          rundir.PARAMS_FILE)
  if ema.enabled(config):  # the averaged weights, fine-tunable like params.npz
    _export(objective.model_params(ema.params_of(state.extra)), workdir, rundir.EMA_PARAMS_FILE)
  extra = objectives.auxiliary_params(objective, state.params, state.extra)
  if extra is not None:  # e.g. MAE's decoder, for reconstructions; DINO's heads
    _export(extra, workdir, rundir.objective_params_file(config.objective))
  writer.flush()
  logging.info('Checkpoint %d on disk after %.1f s; %s and the logs written in %.1f s.',
               config.total_steps, t1 - t0, rundir.PARAMS_FILE, time.time() - t1)
  return {**final, 'step': config.total_steps}


def resolved_config(config: ml_collections.ConfigDict,
                    num_classes: int) -> ml_collections.ConfigDict:
  """The config as run, written to config.json: num_classes filled in from the dataset."""
  out = config.copy_and_resolve_references()
  out.model.num_classes = num_classes
  return out


def _record_config(config: ml_collections.ConfigDict, workdir: str,
                   changes: resume.Changes, start: int) -> None:
  """Writes config.json (a new run) or records the config's changes (a resume)."""
  if jax.process_index() != 0:
    return
  if start:
    resume.record(config, workdir, changes, start)
  else:
    epath.Path(workdir, CONFIG_FILE).write_text(config.to_json_best_effort(indent=2))


def state_init(config: ml_collections.ConfigDict, objective: objectives.Objective,
               tx: Any) -> Callable[[Any], Any]:
  """rng -> a new TrainState as the trainer creates it (weight-EMA slot included)."""
  image_shape = (1, config.pp.crop, config.pp.crop, 3)
  return lambda r: step_lib.init_state(
      objective, tx, r, image_shape, lambda p: ema.init_extra(config, p))


def jitted_step(config: ml_collections.ConfigDict, objective: objectives.Objective,
                tx: Any, schedule: Any, mesh: jax.sharding.Mesh,
                shardings: Any) -> Callable:
  """The train step the loop runs: accumulation, learning-rate metric, weight EMA, jitted."""
  return step_lib.jit_train_step(step_lib.make_train_step(
      objective, tx, config.accum_steps, schedule, ema.make_update(config)), mesh, shardings)


def _initial_state(config, mesh, objective, tx, ckpt) -> tuple[Any, Any, int]:
  """(state, its shardings, first step): resumed, or created sharded (+ pretrained)."""
  rng = jax.random.PRNGKey(config.seed)
  init_fn = state_init(config, objective, tx)
  abstract = jax.eval_shape(init_fn, rng)
  shardings = sharding.tree_shardings(abstract, mesh, config)
  sharded = jax.tree.map(
      lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
      abstract, shardings)
  state, start = ckpt.restore_latest(sharded)
  if state is not None:
    logging.info('Resuming from %s/%d.', ckpt.directory, start)
    return state, shardings, start
  state = jax.jit(init_fn, out_shardings=shardings)(rng)
  path = precheck.pretrained_file(config)
  if path:
    init_params = sharding.to_host(objective.model_params(state.params))
    params = checkpoint.load_pretrained(
        pretrained_path=path, init_params=init_params,
        model_config=families.fields(objective.model))
    params = jax.device_put(objective.with_model_params(state.params, params),
                            shardings.params)
    opt_state = jax.jit(tx.init, out_shardings=shardings.opt_state)(params)
    extra = jax.jit(lambda p, h: step_lib.initial_extra(
        objective, p, lambda q: ema.init_extra(config, q), h),
                    out_shardings=shardings.extra)(params, state.extra.get(step_lib.FP8_KEY))
    state = state.replace(params=params, opt_state=opt_state, extra=extra)
    logging.info('Initialised parameters from %s.', path)
  return state, shardings, 0


def _log_start(config, info, mesh, state, start: int, model) -> None:
  n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
  logging.info('%s: %s parameters; %s: %d train / %d eval examples, %d classes; '
               'mesh %s; batch %d (accum %d); steps %d..%d.',
               naming.label(model, config.model_name),
               f'{n_params:,}', info.name, info.num_train, info.num_eval,
               info.num_classes, dict(mesh.shape), config.batch, config.accum_steps,
               start, config.total_steps)
  if config.get('layer_decay', 1.0) != 1:
    logging.info('Layer-wise lr decay %g: %s.', config.layer_decay, layer_decay.describe(
        state.params, models.family_of(config.model_name).layer_of, config.layer_decay))


def _evaluate(scheduled: evaluators.base.Scheduled, params: Any, step: int,
              writer: Any, suffix: str = '') -> dict:
  """Runs one evaluator, writes what it returns (names + suffix), and returns its scalars."""
  scalars, images = evaluators.base.split_results(scheduled.evaluator.run(params))
  scalars = {f'{k}{suffix}': v for k, v in scalars.items()}
  images = {f'{k}{suffix}': v for k, v in images.items()}
  if scalars:
    writer.write_scalars(step, scalars)
    logging.info('step %d: %s', step, writers.format_scalars(scalars))
  if images:
    writer.write_images(step, images)
  return scalars


def _export(params: Any, workdir: str, name: str) -> None:
  """Writes final parameters as workdir/name in the published .npz layout (process 0)."""
  params = sharding.to_host(params)  # a collective: every process takes part
  if jax.process_index() == 0:
    checkpoint.save(params, os.path.join(workdir, name))


class _Monitor:
  """Progress lines, train metrics, throughput (steps only) and the non-finite stop."""

  def __init__(self, config: ml_collections.ConfigDict,
               objective: objectives.Objective, writer: Any,
               ckpt: checkpointer.StateCheckpointer):
    self._config, self._writer, self._ckpt = config, writer, ckpt
    self._pending = []  # device metrics since the last log line
    self._timer = timing.StepTimer()
    self._t0 = None  # wall clock after the first (compiling) step, for the ETA
    self._first = None
    self._flops = objectives.train_flops_per_image(objective, config.pp.crop,
                                                   view_counts.counts(config.pp))
    # The benchmark's rule (vit_jax.parallel.peaks.resolve_peak), so the two MFUs compare.
    self._peak, source = peaks.resolve_peak(
        config.peak_tflops or 'auto',
        jnp.dtype(models.resolve_dtype(config.model.dtype)).name,
        jax.local_devices()[0])
    if self._peak:
      logging.info('MFU is against %.3g TFLOP/s per device (%s).', self._peak / 1e12,
                   source)

  def after_step(self, step: int, metrics: dict, is_last: bool) -> None:
    """Records a step's metrics; logs them every log_every steps and at the end."""
    self._pending.append(metrics)
    if self._t0 is None:  # compilation stays out of the throughput
      jax.block_until_ready(metrics)
      self._t0, self._first = time.time(), step
      self._timer.start()
    else:
      self._timer.step()
    if step % self._config.log_every == 0 or is_last:
      self._log(step)

  def _log(self, step: int) -> None:
    host = jax.device_get(self._pending)
    self._pending = []
    self._raise_if_non_finite(host, step - len(host) + 1)
    scalars = {k: float(np.mean([m[k] for m in host])) for k in host[0]}
    if 'learning_rate' in host[-1]:
      scalars['learning_rate'] = float(host[-1]['learning_rate'])
    steps, seconds = self._timer.window()
    if steps and seconds > 0:
      img_sec = self._config.batch * steps / seconds
      scalars['img_sec_core'] = img_sec / jax.device_count()
      if self._peak:
        # Never above 1: a step faster than the measured peak raises the peak.
        scalars['mfu'], self._peak, raised = peaks.utilization(
            img_sec * self._flops / jax.device_count(), self._peak)
        if raised:
          logging.info('MFU: the steps ran faster than the measured peak; the peak is now '
                       'their rate, %.3g TFLOP/s per device.', self._peak / 1e12)
    self._writer.write_scalars(step, scalars)
    total = self._config.total_steps
    eta = (time.time() - self._t0) / max(step - self._first, 1) * (total - step)
    speed = (f" {scalars['img_sec_core']:.1f} img/s/core"
             if 'img_sec_core' in scalars else '')
    logging.info('step %d/%d (%.1f%%) loss %.4f lr %.3g%s ETA %s', step, total,
                 100 * step / total, scalars['train_loss'],
                 scalars.get('learning_rate', float('nan')), speed,
                 timing.format_eta(eta))

  def check_finite(self, step: int) -> None:
    """Stops the run if a step since the last log line went non-finite."""
    if self._pending:
      host = jax.device_get(self._pending)
      self._raise_if_non_finite(host, step - len(host) + 1)

  def _raise_if_non_finite(self, host_metrics: list, first_step: int) -> None:
    for i, m in enumerate(host_metrics):
      if not (np.isfinite(m['train_loss']) and np.isfinite(m['grad_norm'])):
        self._ckpt.close()
        last = self._ckpt.latest_step()
        kept = (f'The last good checkpoint is step {last} in {self._ckpt.directory}'
                if last is not None else 'No checkpoint was written yet')
        raise NonFiniteError(
            f'Non-finite loss ({m["train_loss"]}) or gradient norm '
            f'({m["grad_norm"]}) at step {first_step + i}; stopped. {kept}: lower '
            'base_lr or check the data.')

  @contextlib.contextmanager
  def paused(self, state: Any):
    """Waits for the steps in flight, stops the step clock, restarts it after."""
    jax.block_until_ready(state)
    self._timer.pause()
    try:
      yield
    finally:
      self._timer.resume()
