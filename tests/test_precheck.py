"""The trainer's checks that need no model and no data (vit_jax.train.precheck) come first.

Each mistake is refused by the precheck itself, and through the command before TensorFlow
(and so the datasets) is imported: what "an answer in seconds" means, without timing it.
"""
import json
import os
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
import ml_collections
import numpy as np

from vit_jax.configs import base
from vit_jax.train import precheck

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs vit_jax.main as `python -m` would, then reports its exit code and what it imported.
_PROBE = r'''
import json, runpy, sys
sys.argv = ['vit_jax.main', *sys.argv[1:]]
code = 0
try:
  runpy.run_module('vit_jax.main', run_name='__main__', alter_sys=True)
except SystemExit as e:
  code = e.code
print(json.dumps({'code': code, 'tensorflow': 'tensorflow' in sys.modules}), file=sys.__stdout__)
'''


def _config(**overrides) -> ml_collections.ConfigDict:
  config = base.get_base_config()
  config.model_name = 'testing'
  config.dataset = 'mnist5k'
  config.update_from_flattened_dict(overrides)
  return config


class PrecheckTest(absltest.TestCase):

  def test_model_name_and_dtype(self):
    precheck.check_model(_config())
    with self.assertRaisesRegex(ValueError, r"Unknown model 'ViT-Q_16' \(did you mean"):
      precheck.check_model(_config(model_name='ViT-Q_16'))
    with self.assertRaisesRegex(ValueError, r"Unknown dtype 'bf16'; use one of .*bfloat16"):
      precheck.check_model(_config(**{'model.dtype': 'bf16'}))

  def test_dataset_names(self):
    with self.assertRaisesRegex(ValueError, r"Unknown dataset 'mnist'. Did you mean 'mnist5k'"):
      precheck.check_datasets(_config(dataset='mnist'))
    with self.assertRaisesRegex(ValueError, r"config.evals.test.dataset: Unknown dataset 'cifar'"):
      precheck.check_datasets(_config(**{'evals.test.dataset': 'cifar', 'evals.test.every': 5}))

  def test_splits_of_an_embedded_dataset(self):
    self.assertEqual(precheck.split_names('train[:800]+ test[5%:]'), ['train', 'test'])
    precheck.check_datasets(_config(train_split='train[:800]+train[900:]', eval_split='test'))
    with self.assertRaisesRegex(ValueError, r"config.train_split='trian\[:90%\]': mnist5k has "
                                r"no split 'trian'; did you mean train\?"):
      precheck.check_datasets(_config(train_split='trian[:90%]'))
    with self.assertRaisesRegex(ValueError, r"eval_split='validation': digits has no split "
                                r"'validation'; its splits are test, train."):
      precheck.check_datasets(_config(dataset='digits', eval_split='validation'))

  def test_manual_archives_unless_prepared(self):
    root = self.create_tempdir().full_path
    config = _config(dataset='imagenet2012', data_dir=root)
    with self.assertRaisesRegex(FileNotFoundError, r'imagenet2012 needs the manually '
                                r'downloaded ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar'):
      precheck.check_datasets(config)
    manual = os.path.join(root, 'downloads', 'manual')
    os.makedirs(manual)
    open(os.path.join(manual, 'ILSVRC2012_img_train.tar'), 'w').close()
    with self.assertRaisesRegex(FileNotFoundError, r'downloaded ILSVRC2012_img_val.tar in'):
      precheck.check_datasets(config)
    # A prepared copy needs no archives.
    os.remove(os.path.join(manual, 'ILSVRC2012_img_train.tar'))
    prepared = os.path.join(root, 'imagenet2012', '5.1.0')
    os.makedirs(prepared)
    open(os.path.join(prepared, 'dataset_info.json'), 'w').close()
    precheck.check_datasets(config)

  def test_garbage_npz(self):
    root = self.create_tempdir().full_path
    garbage = os.path.join(root, 'ViT-B_16.npz')
    with open(garbage, 'w') as f:
      f.write('<html>Not found</html>')
    with self.assertRaisesRegex(ValueError, r'ViT-B_16.npz is not an .npz file'):
      precheck.check_npz_file(garbage)
    good = os.path.join(root, 'good.npz')
    np.savez(good, a=np.zeros(2))
    precheck.check_npz_file(good)

  def test_remote_checkpoint_offline_is_named_without_the_file_system(self):
    self.assertTrue(precheck._offline('storage.invalid'))  # .invalid never resolves (RFC 2606)
    with mock.patch.object(precheck, '_GCS_HOST', 'storage.invalid'):
      with self.assertRaisesRegex(FileNotFoundError, r'gs://b/x.npz \(offline: cannot '
                                  r'resolve storage.invalid\). Fetch it by hand'):
        precheck.check_remote_checkpoint('gs://b/x.npz')


class BeforeTensorFlowTest(absltest.TestCase):

  def test_command_refuses_before_tensorflow_loads(self):
    home = self.create_tempdir().full_path  # no ~/tensorflow_datasets
    env = dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu', HOME=home)
    env.pop('TFDS_DATA_DIR', None)
    for args, says in (
        (['--config=configs/pretrain_mae.py:b16,imagenet2012'],
         'imagenet2012 needs the manually downloaded ILSVRC2012_img_train.tar'),
        (['--config=quickstart', '--config.model.dtype=bf16'], "Unknown dtype 'bf16'")):
      workdir = os.path.join(home, 'run')
      out = subprocess.run([sys.executable, '-c', _PROBE, *args, f'--workdir={workdir}'],
                           capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
                           check=False)
      self.assertEqual(json.loads(out.stdout.strip().splitlines()[-1]),
                       {'code': 2, 'tensorflow': False}, out.stderr[-2000:])
      self.assertLen(out.stderr.strip().splitlines(), 1)
      self.assertIn(says, out.stderr)
      self.assertFalse(os.path.exists(workdir))


if __name__ == '__main__':
  absltest.main()
