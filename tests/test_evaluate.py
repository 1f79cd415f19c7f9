"""`python -m vit_jax.evaluate`: a checkpoint's accuracy and loss on a split, every example once."""
import os
import re
import sys

from absl.testing import absltest
import numpy as np
import optax
import tensorflow_datasets as tfds

from tests import commands
from tests import tiny_trained
from vit_jax.data import sources
from vit_jax.models import formats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMM = os.path.join(REPO, 'tests', 'testdata', 'interop', 'timm_vit.safetensors')
_LINE = re.compile(r'^(\S+) (\S+): accuracy ([\d.]+), loss ([\d.]+), (\d+) examples$')


def _evaluate(*args: str) -> tuple[str, str, float, float, int]:
  """(dataset, split, accuracy, loss, examples) printed by the command."""
  env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu')
  proc = commands.run([sys.executable, '-m', 'vit_jax.evaluate', *args], env=env, timeout=600,
                      cwd='/')
  if proc.returncode:
    raise AssertionError(proc.stderr[-2000:])
  m = _LINE.match(proc.stdout.strip())
  if not m:
    raise AssertionError(f'unexpected output {proc.stdout!r}')
  return m[1], m[2], float(m[3]), float(m[4]), int(m[5])


class EvaluateTest(absltest.TestCase):

  def test_a_workdir_is_evaluated_as_its_run_evaluated_it(self):
    params, _, final = tiny_trained.trained()
    dataset, split, accuracy, loss, examples = _evaluate(f'--checkpoint={params}')
    self.assertEqual((dataset, split, examples), ('mnist5k', 'test', 1000))
    self.assertAlmostEqual(accuracy, final['accuracy_test'], places=4)
    self.assertAlmostEqual(loss, final['loss_test'], places=4)
    # Another split of the same data, and the odd-sized last batch counted once; the
    # work directory itself names its params.npz.
    _, split, _, _, examples = _evaluate(f'--checkpoint={os.path.dirname(params)}',
                                         '--split=test[:333]', '--batch=64')
    self.assertEqual((split, examples), ('test[:333]', 333))

  def test_a_timm_file_matches_a_numpy_reference(self):
    data_dir = self.create_tempdir().full_path
    name = 'synthetic/16px_5cls_8train_40test'
    dataset, split, accuracy, loss, examples = _evaluate(
        f'--checkpoint={TIMM}', '--num_heads=2', f'--dataset={name}',
        f'--data_dir={data_dir}', '--batch=16')
    self.assertEqual((dataset, split, examples), (name, 'test', 40))
    # Reference: the same 16 px images straight into the model, no pipeline.
    builder = sources.make_builder(sources.resolve(name), data_dir)
    test = tfds.as_numpy(builder.as_dataset(split='test', batch_size=-1))
    images = test['image'].astype(np.float32) / 127.5 - 1
    ckpt = formats.read(TIMM, num_heads=2)
    logits = np.asarray(ckpt.get_model().apply({'params': ckpt.params}, images,
                                               train=False))
    want_loss = optax.softmax_cross_entropy_with_integer_labels(
        logits, test['label']).mean()
    self.assertAlmostEqual(accuracy, (logits.argmax(-1) == test['label']).mean(), places=4)
    self.assertAlmostEqual(loss, float(want_loss), places=4)


if __name__ == '__main__':
  absltest.main()
