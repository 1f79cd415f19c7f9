"""Test-session setup: simulated CPU devices must be requested before jax starts."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile


def _xla_flags() -> str:
  """The suite's XLA flags: XLA's code optimisation off where it knows how.

  The suite compiles hundreds of small programs and runs each for a few steps, so XLA's code
  optimisation costs more than it saves: with these flags a tiny ViT's train step compiles
  in 1.1 s instead of 6.1 s and runs 3x slower; results agree with the default flags to
  float32 round-off. XLA aborts on a flag it does not know, so the flags are tried once per
  session in a subprocess. Where the jaxlib dropped the fusion-emitter flag (0.12), level 0
  alone changes float32 results between meshes (Mixup on 2 vs 8 devices differs in the last
  bit), so only the LLVM flag is kept there.
  """
  def known(tried: str) -> bool:
    probe = subprocess.run([sys.executable, '-c', 'import jax; jax.devices("cpu")'],
                           env={**os.environ, 'XLA_FLAGS': tried, 'JAX_PLATFORMS': 'cpu'},
                           capture_output=True, check=False, timeout=300)
    return probe.returncode == 0

  lean = '--xla_llvm_disable_expensive_passes=true'
  fast = ' '.join(('--xla_backend_optimization_level=0', lean,
                   '--xla_cpu_use_fusion_emitters=false'))
  if known(fast):
    return fast
  return lean if known(lean) else ''


if 'XLA_FLAGS' not in os.environ:
  os.environ['XLA_FLAGS'] = _xla_flags()
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# Many tests compile the same small train steps (in-process and in subprocesses);
# a persistent compilation cache shared by the session compiles each once.
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR',
                      tempfile.mkdtemp(prefix='vit_jax_test_xla_cache_'))
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
# One directory for the whole session, xdist workers included (they inherit the environment
# of the process that loaded this file first): the TFDS data and the tiny trained model in
# it are prepared once, not once per worker (tests/tfds_testdata.py, tests/tiny_trained.py).
if 'VITJAX_TEST_SESSION_DIR' not in os.environ:
  os.environ['VITJAX_TEST_SESSION_DIR'] = tempfile.mkdtemp(prefix='vit_jax_test_session_')
  atexit.register(shutil.rmtree, os.environ['VITJAX_TEST_SESSION_DIR'], ignore_errors=True)
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '0')

# absltest helpers (create_tempdir, ...) read absl flags, which pytest never parses.
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

flags.FLAGS.mark_as_parsed()

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position

# The suite's processes see 8 CPU devices (the sharding, FSDP and multi-device tests); the
# commands the tests start as subprocesses see one, as on a user's CPU, unless a test asks
# for more (test_distributed): a tiny run costs less on one device than on eight.
if '--xla_force_host_platform_device_count' not in os.environ['XLA_FLAGS']:
  jax.config.update('jax_num_cpu_devices', 8)

# The slowest files (seconds in a 2-worker run on 2 cores, 2026-11-26) go to the workers first:
# xdist hands files out in collection order, and one long file left for the end keeps one
# worker busy while the other idles.
_SLOW_FILES = {'test_train.py': 138, 'test_dino.py': 122, 'test_run_lifecycle.py': 98,
               'test_models.py': 92, 'test_ssl_training.py': 75, 'test_distributed.py': 71,
               'test_integrity.py': 58, 'test_variants_product.py': 56, 'test_serving.py': 52,
               'test_input_pipeline.py': 45, 'test_interop.py': 37, 'test_bad_input.py': 35,
               'test_notebook.py': 34, 'test_model_contract.py': 34,
               # Added 2026-11-28 (alone, -n 0, on shared cores): the evaluation protocols.
               'test_linear_protocols.py': 80, 'test_real.py': 70, 'test_vtab.py': 70,
               'test_error_wording.py': 40, 'test_entry.py': 40,
               # Added 2026-11-28 (issue 46): runs under a file-size limit and a full tmpfs.
               'test_disk_faults.py': 60,
               # Added 2026-11-28 (issue 41): fp8 delayed scaling trains tiny models.
               'test_fp8_delayed.py': 40,
               # Added 2026-11-28 (issue 41): the fused MLP kernels, interpreted on CPU.
               'test_mlp_kernel.py': 55,
               # Added 2026-11-28 (issue 43): an export to a Hub folder, commands' one-line errors.
               'test_hub.py': 60,
               # Added 2026-11-28 (issue 41): engine builds and the tiny trained model.
               'test_inference_engine.py': 50,
               # Added 2026-11-28 (issue 43): three tiny runs against a teacher, resume.
               'test_distill.py': 60}


def pytest_collection_modifyitems(items):
  """Orders the collected tests by file: the slowest files first, then the rest as found."""
  items.sort(key=lambda item: -_SLOW_FILES.get(os.path.basename(str(item.path)), 0))
