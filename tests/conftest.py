"""Test-session setup: simulated CPU devices must be requested before jax starts."""
import os

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=8')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

# absltest helpers (create_tempdir, ...) read absl flags, which pytest never parses.
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.FLAGS.mark_as_parsed()
