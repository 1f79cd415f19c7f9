"""Train-state checkpoints with orbax: async, atomic, keep-last-N, sharded restore, verified.

Each step directory gets a checksum manifest once orbax has committed it
(vit_jax.train.integrity). A resume takes the newest step that passes its manifest,
restores and holds only finite values; newer steps that fail are moved aside to
WORKDIR/checkpoints_corrupt/STEP-REASON (never deleted) with one warning each.
"""
import dataclasses
import logging
import os
import re
import threading
import time
from typing import Any, Optional

from etils import epath
import jax
from jax.experimental import multihost_utils
import orbax.checkpoint as ocp

from vit_jax import errors
from vit_jax import fileio
from vit_jax import rundir
from vit_jax.train import integrity

CHECKPOINT_DIR = rundir.CHECKPOINT_DIR
CORRUPT_DIR = 'checkpoints_corrupt'
# What orbax writes a step into before renaming it to STEP (local file systems).
HALF_WRITTEN_SUFFIX = '.orbax-checkpoint-tmp'
_HALF_WRITTEN = re.compile(r'^\d+' + re.escape(HALF_WRITTEN_SUFFIX))


class CheckpointMismatchError(ValueError):
  """A checkpoint is intact but was written for another model or optimizer."""


class NoGoodCheckpointError(ValueError):
  """Every checkpoint of the workdir failed verification or restore."""


def _legacy_target(saved: Any, abstract_state: Any) -> Optional[dict]:
  """The restore target of a checkpoint written before the state had an `extra` slot.

  Such a step resumes into a state whose slot is empty (no weight EMA, no teacher);
  None when the checkpoint has the slot or the state needs it filled.
  """
  extra = getattr(abstract_state, 'extra', None)
  if not isinstance(saved, dict) or 'extra' in saved or extra is None or jax.tree.leaves(extra):
    return None
  return {f.name: getattr(abstract_state, f.name)
          for f in dataclasses.fields(abstract_state) if f.name != 'extra'}


def _array_shapes(tree: Any) -> list[tuple]:
  """Sorted shapes of the array leaves: equal for the same model and optimizer."""
  return sorted(tuple(x.shape) for x in jax.tree.leaves(tree)
                if hasattr(x, 'shape'))


def _param_shapes(tree: Any) -> dict[str, tuple]:
  """'a/b/c' -> shape of each array leaf."""
  return {jax.tree_util.keystr(p, simple=True, separator='/'): tuple(x.shape)
          for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]
          if hasattr(x, 'shape')}


def _kind(why: str) -> str:
  """A one-word tag of a problem, for the name of the moved-aside directory."""
  for word, kind in (('NaN or Inf', 'nonfinite'), ('CRC32', 'checksum'),
                     ('bytes', 'size'), ('is missing', 'missing'),
                     (integrity.MANIFEST, 'manifest'), ('metadata', 'metadata')):
    if word in why:
      return kind
  return 'restore'


def _join_orbax_threads(timeout_s: float = 30.0) -> None:
  """Waits (a bounded time) for the threads orbax started, e.g. the writes of a failed save."""
  deadline = time.time() + timeout_s
  for thread in threading.enumerate():
    if (type(thread).__module__.startswith('orbax.') and
        thread is not threading.current_thread()):
      thread.join(max(deadline - time.time(), 0))


class StateCheckpointer:
  """Saves and restores the full TrainState under WORKDIR/checkpoints/STEP."""

  def __init__(self, workdir: str, keep: int, async_save: bool = True,
               verify: bool = True):
    if not fileio.is_remote(workdir):  # gs:// and friends are already absolute
      workdir = os.path.abspath(workdir)
    self.directory = os.path.join(workdir, CHECKPOINT_DIR)
    self.corrupt_directory = os.path.join(workdir, CORRUPT_DIR)
    self._verify = verify
    self._async = async_save
    self._unsealed = set()  # steps saved by this process that still lack a manifest
    self._lock = threading.Lock()
    self._closed = False
    self._sealers = []
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max(keep, 1), create=True,
        enable_async_checkpointing=async_save)
    self._manager = ocp.CheckpointManager(
        self.directory, options=options,
        item_handlers=ocp.StandardCheckpointHandler())

  def _step_dir(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  def latest_step(self) -> Optional[int]:
    """The step of the newest complete checkpoint, or None."""
    return self._manager.latest_step()

  def save(self, step: int, state: Any, *, force: bool = False) -> None:
    """Starts an (async) save of `state` at `step`; a second save of a step is skipped."""
    if step in self._manager.all_steps():
      return
    with self._lock:
      self._unsealed.add(step)
    self._manager.save(step, args=ocp.args.StandardSave(state), force=force)
    if not self._async:
      self._seal(step)
    elif jax.process_index() == 0:
      # Seals the step as soon as orbax has committed it, not at the next save: a
      # kill in between would leave the newest step without a manifest.
      sealer = threading.Thread(target=self._seal_when_committed, args=(step,),
                                daemon=True, name=f'vit_jax-seal-{step}')
      sealer.start()
      self._sealers.append(sealer)

  def _committed(self, step: int) -> bool:
    """Whether orbax has committed the step (renamed in place; on gs://, marked)."""
    step_dir = epath.Path(self._step_dir(step))
    if fileio.is_remote(self.directory):
      return (step_dir / 'commit_success.txt').exists()
    return step_dir.is_dir()

  def _seal_when_committed(self, step: int, poll_s: float = 0.05) -> None:
    while not self._closed:
      with self._lock:
        if step not in self._unsealed:
          return
      if self._committed(step):
        self._seal(step)
        return
      time.sleep(poll_s)

  def _seal(self, step: int) -> None:
    """Writes the manifest of a committed step this process saved (process 0 only)."""
    with self._lock:  # claimed once; the read runs unlocked so save() never waits
      if step not in self._unsealed:
        return
      self._unsealed.discard(step)
    if jax.process_index() != 0:
      return
    try:
      integrity.write_manifest(self._step_dir(step))
    except FileNotFoundError:  # removed by keep_checkpoints meanwhile
      logging.debug('checkpoint %d went away before its manifest', step)
    except OSError as e:  # a full disk must not stop training: orbax's save stands
      logging.warning('Could not write the manifest of %s (%s); it will be restored '
                      'unverified.', self._step_dir(step), e)

  def restore_latest(self, abstract_state: Any) -> tuple[Any, Optional[int]]:
    """(state, step) of the newest good checkpoint, or (None, None) if there are none.

    Steps that fail their manifest, fail to restore or hold NaN/Inf are skipped; if an
    older one is good, the bad newer ones are moved aside with a warning each. If none
    is good, NoGoodCheckpointError names each and nothing on disk is changed.
    """
    bad = []
    warned_legacy = False
    for step in sorted(self._manager.all_steps(), reverse=True):
      step_dir = self._step_dir(step)
      problem = None
      if self._verify:
        if integrity.has_manifest(step_dir):
          problem = integrity.verify(step_dir)
        elif not warned_legacy:
          logging.warning('Checkpoint %s has no checksum manifest (written before '
                          'vit_jax wrote them, or cut off just after its commit); '
                          'restoring it unverified.', step_dir)
          warned_legacy = True
      state = None
      if problem is None:
        state, problem = self._try_restore(step, abstract_state)
      if problem is None:
        self._move_aside(bad, step)
        return state, step
      bad.append((step, problem))
    if bad:
      listed = '; '.join(f'{s} ({why})' for s, why in bad)
      raise NoGoodCheckpointError(
          f'No checkpoint in {self.directory} is intact: {listed}. Nothing was '
          'changed; copy good checkpoints back, or move that directory away to start '
          'from scratch.')
    return None, None

  def _try_restore(self, step: int, abstract_state: Any) -> tuple[Any, Optional[str]]:
    """(state, None), or (None, why the step is damaged); raises if it does not fit."""
    try:
      saved = self._manager.item_metadata(step)
      saved = getattr(saved, 'tree', saved)
    except Exception as e:  # pylint: disable=broad-except  (orbax/tensorstore errors)
      return None, f'unreadable metadata: {errors.first_line(e)}'
    if saved is None:
      return None, 'unreadable metadata'
    target = _legacy_target(saved, abstract_state)
    self._check_fits(step, saved, abstract_state if target is None else target)
    try:
      if target is None:
        state = self._manager.restore(step, args=ocp.args.StandardRestore(abstract_state))
      else:
        state = abstract_state.replace(**self._manager.restore(
            step, args=ocp.args.StandardRestore(target)))
    except Exception as e:  # pylint: disable=broad-except  (orbax/tensorstore errors)
      return None, f'restore failed: {errors.first_line(e)}'
    leaf = integrity.non_finite_leaf(state)
    if leaf is not None:
      return None, f'{leaf} holds NaN or Inf'
    return state, None

  def _check_fits(self, step: int, saved: Any, abstract_state: Any) -> None:
    """Raises CheckpointMismatchError when the saved tree is another model's or optimizer's."""
    saved_params = saved.get('params') if isinstance(saved, dict) else None
    want_params = getattr(abstract_state, 'params', None)
    problem = None
    if saved_params is not None and want_params is not None:
      got, want = _param_shapes(saved_params), _param_shapes(want_params)
      for key in sorted(set(got) | set(want)):
        if got.get(key) != want.get(key):
          problem = (f'params/{key} is {got.get(key, "absent")} there, '
                     f'{want.get(key, "absent")} here')
          break
    if problem is None and _array_shapes(saved) != _array_shapes(abstract_state):
      problem = 'the optimizer state differs'
    if problem:
      raise CheckpointMismatchError(
          f'The checkpoint {self._step_dir(step)} does not fit this model and '
          f'optimizer ({problem}); resume with the config that wrote it '
          '(its config.json), or use a new --workdir.')

  def _move_aside(self, bad: list[tuple[int, str]], good: int) -> None:
    """Moves the damaged newer steps to CORRUPT_DIR, warning once per step."""
    if not bad:
      return
    if jax.process_index() == 0:
      epath.Path(self.corrupt_directory).mkdir(parents=True, exist_ok=True)
    for step, why in bad:
      slug = _kind(why)
      target = os.path.join(self.corrupt_directory, f'{step}-{slug}')
      n = 1
      while epath.Path(target).exists():  # the same step can go bad twice
        target = os.path.join(self.corrupt_directory, f'{step}-{slug}.{n}')
        n += 1
      logging.warning('Checkpoint %s is damaged (%s); moved it to %s and resuming '
                      'from step %d.', self._step_dir(step), why, target, good)
      if jax.process_index() == 0:
        epath.Path(self._step_dir(step)).rename(target)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices('vit_jax_checkpoints_moved_aside')
    self._manager.reload()

  def reached_preemption(self, step: int) -> bool:
    """True on every process once a multi-host preemption notice reached `step`."""
    if jax.process_count() == 1:
      return False
    return self._manager.reached_preemption(step)

  def wait(self) -> None:
    """Blocks until pending async saves are complete on disk and sealed."""
    self._manager.wait_until_finished()
    with self._lock:
      pending = sorted(self._unsealed)
    for step in pending:
      if self._committed(step):
        self._seal(step)
      else:  # orbax did not commit it (a failed save): nothing to seal
        with self._lock:
          self._unsealed.discard(step)
    for sealer in self._sealers:  # one may be writing a manifest it claimed
      sealer.join()
    self._sealers = [s for s in self._sealers if s.is_alive()]

  def last_good(self) -> str:
    """'checkpoint N is intact' (the newest committed step) or that none was written yet."""
    root = epath.Path(self.directory)
    steps = [int(p.name) for p in root.iterdir() if p.name.isdigit()] if root.exists() else []
    steps = [s for s in steps if self._committed(s)]
    if not steps:
      return 'no checkpoint was written yet'
    return f'checkpoint {max(steps)} is intact'

  def close_after_fault(self) -> None:
    """Closes after a failed write: the half-written step is removed, committed ones stay."""
    try:
      self.close()
    except Exception:  # pylint: disable=broad-except  (the failed save's own error, reported)
      logging.debug('closing %s after a failed write', self.directory, exc_info=True)
    _join_orbax_threads()  # the step's other writes may still run after the first failed
    root = epath.Path(self.directory)
    if jax.process_index() == 0 and root.exists():
      for path in root.iterdir():
        if _HALF_WRITTEN.match(path.name):
          path.rmtree()

  def close(self) -> None:
    """Finishes pending saves, seals them and releases orbax's threads (idempotent)."""
    if self._closed:
      return
    try:
      self.wait()
    finally:
      self._closed = True
      self._manager.close()
    logging.debug('closed checkpoint manager at %s', self.directory)
