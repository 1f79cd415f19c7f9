"""Stop signals: SIGTERM (preemption) or Ctrl-C asks the loop to checkpoint and stop.

The first signal is recorded and the loop saves a checkpoint after the step in flight;
a second Ctrl-C aborts at once (KeyboardInterrupt).
"""
import logging
import signal
import threading

import jax

PREEMPTED_EXIT_CODE = 143    # 128 + SIGTERM, what a scheduler expects
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, what a shell reports after Ctrl-C
EXIT_CODES = {signal.SIGTERM: PREEMPTED_EXIT_CODE, signal.SIGINT: INTERRUPTED_EXIT_CODE}


class Preempted(Exception):
  """Raised after a stop signal once a checkpoint is safely on disk."""

  def __init__(self, step: int, directory: str, signum: int = signal.SIGTERM):
    self.step, self.directory, self.signum = step, directory, signum
    super().__init__(f'{self.kind.capitalize()} at step {step}: checkpoint saved in '
                     f'{directory}; run the same command again to resume.')

  @property
  def kind(self) -> str:
    """'interrupted' (Ctrl-C) or 'preempted' (SIGTERM)."""
    return 'interrupted' if self.signum == signal.SIGINT else 'preempted'

  @property
  def exit_code(self) -> int:
    """128 + the signal number: 143 for SIGTERM, 130 for Ctrl-C."""
    return EXIT_CODES.get(self.signum, PREEMPTED_EXIT_CODE)


class SignalFlag:
  """Records SIGTERM and Ctrl-C (single-process runs) so the loop can checkpoint.

  With several processes JAX's own preemption notifier handles SIGTERM and orbax's
  sync point makes every host save the same step (StateCheckpointer.reached_preemption).
  """

  def __init__(self):
    self.signum = None  # the first stop signal received
    self._ctrl_c = False
    self._previous = {}

  @property
  def raised(self) -> bool:
    """Whether a stop signal arrived."""
    return self.signum is not None

  def __enter__(self) -> 'SignalFlag':
    if (jax.process_count() == 1 and
        threading.current_thread() is threading.main_thread()):
      for signum in (signal.SIGTERM, signal.SIGINT):
        self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    if signum == signal.SIGINT and self._ctrl_c:
      self._restore()  # the user insists: stop now, checkpoint or not
      raise KeyboardInterrupt
    if self.signum is None:
      self.signum = signum
    if signum == signal.SIGINT:
      self._ctrl_c = True
      logging.warning('Ctrl-C: saving a checkpoint after this step and stopping '
                      '(Ctrl-C again to abort at once).')
    else:
      logging.warning('SIGTERM received: saving a checkpoint at the next step.')

  def _restore(self) -> None:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous = {}

  def __exit__(self, *exc):
    self._restore()
