"""Preemption: a SIGTERM asks the loop to save a checkpoint at the next step and stop."""
import logging
import signal
import threading

import jax

PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM, what a scheduler expects


class Preempted(Exception):
  """Raised after a preemption signal once a checkpoint is safely on disk."""


class SignalFlag:
  """Records SIGTERM (single-process runs) so the loop can checkpoint at the next step.

  With several processes JAX's own preemption notifier handles SIGTERM and orbax's
  sync point makes every host save the same step (StateCheckpointer.reached_preemption).
  """

  def __init__(self):
    self.raised = False
    self._previous = None

  def __enter__(self) -> 'SignalFlag':
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
