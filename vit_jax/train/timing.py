"""Time spent on training steps alone, and the ETA of the progress line."""
import time


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


def format_eta(seconds: float) -> str:
  """'1h02m03s' or '2m03s'."""
  seconds = int(max(seconds, 0))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f'{h}h{m:02d}m{s:02d}s' if h else f'{m}m{s:02d}s'
