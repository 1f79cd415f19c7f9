"""Train-state checkpoints with orbax: async, atomic, keep-last-N, sharded restore."""
import logging
import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp

from vit_jax import fileio

CHECKPOINT_DIR = 'checkpoints'


class StateCheckpointer:
  """Saves and restores the full TrainState under WORKDIR/checkpoints/STEP."""

  def __init__(self, workdir: str, keep: int, async_save: bool = True):
    if not fileio.is_remote(workdir):  # gs:// and friends are already absolute
      workdir = os.path.abspath(workdir)
    self.directory = os.path.join(workdir, CHECKPOINT_DIR)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max(keep, 1), create=True,
        enable_async_checkpointing=async_save)
    self._manager = ocp.CheckpointManager(self.directory, options=options)

  def latest_step(self) -> Optional[int]:
    """The step of the newest complete checkpoint, or None."""
    return self._manager.latest_step()

  def save(self, step: int, state: Any, *, force: bool = False) -> None:
    """Starts an (async) save of `state` at `step`; a second save of a step is skipped."""
    if step in self._manager.all_steps():
      return
    self._manager.save(step, args=ocp.args.StandardSave(state), force=force)

  def restore(self, step: int, abstract_state: Any) -> Any:
    """Restores the checkpoint of `step` into arrays with abstract_state's shardings."""
    try:
      return self._manager.restore(
          step, args=ocp.args.StandardRestore(abstract_state))
    except (ValueError, KeyError, TypeError) as e:
      first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
      raise ValueError(
          f'The checkpoint {self.directory}/{step} does not fit this model and '
          f'optimizer ({first[:300]}); use a new --workdir or the config that '
          'wrote it.') from None

  def reached_preemption(self, step: int) -> bool:
    """True on every process once a multi-host preemption notice reached `step`."""
    if jax.process_count() == 1:
      return False
    return self._manager.reached_preemption(step)

  def wait(self) -> None:
    """Blocks until pending async saves are complete on disk."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()
    logging.debug('closed checkpoint manager at %s', self.directory)
