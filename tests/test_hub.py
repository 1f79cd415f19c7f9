"""Checkpoints by hub name (hf-hub:ORG/NAME[@REVISION]) and export --hub_dir / --push_to_hub.

The tests lay out huggingface_hub's cache as the library documents it (models--ORG--NAME/
blobs, snapshots/<commit>/<file> linking to a blob, refs/<branch or tag> holding the commit),
check that huggingface_hub's own scan_cache_dir reads it so, and resolve offline: nothing is
downloaded. The repositories hold the checkpoints timm and transformers saved in
tests/testdata/interop.
"""
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
import huggingface_hub
import jax
import numpy as np
import safetensors.numpy

from tests import commands
from tests import test_entry
from tests import tiny_trained
from vit_jax import checkpoint
from vit_jax import models
from vit_jax import rundir
from vit_jax.inference import load
from vit_jax.inference import predict
from vit_jax.models.formats import hub
from vit_jax.train import precheck

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, 'tests', 'testdata', 'interop')
# timm's config.json of a hub repository (timm.models._hub.save_config_for_hf): the
# architecture, and the model_args create_model was given beyond the name.
TIMM_CONFIG = {'architecture': 'vit_tiny_patch16_224', 'num_classes': 5, 'num_features': 16,
               'global_pool': 'token',
               'model_args': {'embed_dim': 16, 'depth': 2, 'num_heads': 2, 'patch_size': 4,
                              'img_size': 16},
               'pretrained_cfg': {'tag': 'fixture', 'input_size': [3, 16, 16],
                                  'mean': [0.5] * 3, 'std': [0.5] * 3, 'num_classes': 5}}


def _read(path: str) -> bytes:
  with open(path, 'rb') as f:
    return f.read()


def _etag(name: str, data: bytes) -> str:
  """A blob's name: the sha256 of an LFS file (weights), else the git blob sha1."""
  if name.endswith(('.safetensors', '.bin', '.pth')):
    return hashlib.sha256(data).hexdigest()
  return hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest()


def cache_commit(cache: str, repo_id: str, files: dict[str, bytes],
                 refs: tuple[str, ...] = ('main',)) -> str:
  """Adds one commit of a model repository to a huggingface_hub cache; returns its hash."""
  folder = os.path.join(cache, 'models--' + repo_id.replace('/', '--'))
  commit = hashlib.sha1(b''.join(n.encode() + d for n, d in sorted(files.items()))).hexdigest()
  for name, data in files.items():
    blob = os.path.join(folder, 'blobs', _etag(name, data))
    os.makedirs(os.path.dirname(blob), exist_ok=True)
    with open(blob, 'wb') as f:
      f.write(data)
    link = os.path.join(folder, 'snapshots', commit, name)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
  for ref in refs:
    os.makedirs(os.path.join(folder, 'refs'), exist_ok=True)
    with open(os.path.join(folder, 'refs', ref), 'w') as f:
      f.write(commit)
  return commit


def _directory_files(directory: str) -> dict[str, bytes]:
  return {n: _read(os.path.join(directory, n)) for n in sorted(os.listdir(directory))}


@contextlib.contextmanager
def hub_env(cache: str, offline: bool = True):
  """huggingface_hub in this process as HF_HUB_CACHE=cache HF_HUB_OFFLINE=1 would set it up."""
  with mock.patch.object(huggingface_hub.constants, 'HF_HUB_CACHE', cache), \
       mock.patch.object(huggingface_hub.constants, 'HF_HUB_OFFLINE', offline):
    yield


# Runs vit_jax.export's early flag check on each command line of argv[1] (a JSON list).
_CHECK_EXPORT = """
import json, sys
from absl import flags
from vit_jax.cli import common, early
common.define_export_flags()
errors = []
for argv in json.loads(sys.argv[1]):
  flags.FLAGS(['export', *argv], known_only=True)
  try:
    early.check_export(flags.FLAGS)
    errors.append('')
  except (ValueError, OSError) as e:
    errors.append(str(e))
  flags.FLAGS.unparse_flags()
print(json.dumps(errors))
"""


def _env(cache: str) -> dict:
  return dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS='cpu', HF_HUB_CACHE=cache,
              HF_HUB_OFFLINE='1')


class ResolveTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cache = os.path.join(absltest.get_default_test_tmpdir(), 'hub_cache')
    shutil.rmtree(cls.cache, ignore_errors=True)
    hf_files = _directory_files(os.path.join(FIXTURES, 'hf_classifier'))
    cls.hf_commit = cache_commit(cls.cache, 'acme/vit-tiny', hf_files, refs=('v1',))
    # A later commit on main: the same model with another head bias.
    state = safetensors.numpy.load(hf_files['model.safetensors'])
    state['classifier.bias'] = state['classifier.bias'] + 1.0
    cls.main_commit = cache_commit(cls.cache, 'acme/vit-tiny', {
        **hf_files, 'model.safetensors': safetensors.numpy.save(state, {'format': 'pt'})})
    cls.timm_commit = cache_commit(cls.cache, 'timm/vit_fixture.test', {
        'config.json': json.dumps(TIMM_CONFIG).encode(),
        'model.safetensors': _read(os.path.join(FIXTURES, 'timm_vit.safetensors')),
        'README.md': b'---\nlibrary_name: timm\n---\n'})
    cache_commit(cls.cache, 'acme/card-only', {'README.md': b'# A card, no weights\n'})
    with np.load(os.path.join(FIXTURES, 'reference_logits.npz')) as f:
      cls.ref = dict(f)

  def _probs(self, path: str, **kwargs) -> np.ndarray:
    loaded = load.load_model(None, path, **kwargs)
    return np.asarray(predict.make_predict_fn(loaded)(self.ref['images']))

  def test_the_layout_is_the_one_huggingface_hub_reads(self):
    info = {r.repo_id: r for r in huggingface_hub.scan_cache_dir(self.cache).repos}
    self.assertEqual(set(info), {'acme/vit-tiny', 'timm/vit_fixture.test', 'acme/card-only'})
    revisions = {r.commit_hash: set(r.refs) for r in info['acme/vit-tiny'].revisions}
    self.assertEqual(revisions, {self.hf_commit: {'v1'}, self.main_commit: {'main'}})

  def test_transformers_repository_resolves_to_its_snapshot_and_loads(self):
    with hub_env(self.cache):
      path = load.resolve_checkpoint('hf-hub:acme/vit-tiny@v1')
      self.assertEqual(path, os.path.join(self.cache, 'models--acme--vit-tiny', 'snapshots',
                                          self.hf_commit))
      np.testing.assert_allclose(self._probs('hf-hub:acme/vit-tiny@v1'),
                                 jax.nn.softmax(self.ref['hf_classifier']), atol=1e-5)

  def test_timm_repository_resolves_to_its_weights_and_its_config_names_the_model(self):
    with hub_env(self.cache):
      path = load.resolve_checkpoint('hf-hub:timm/vit_fixture.test')
      self.assertEqual(os.path.basename(path), 'model.safetensors')
      # No --num_heads: timm's config.json gives them (model_args).
      np.testing.assert_allclose(self._probs('hf-hub:timm/vit_fixture.test'),
                                 jax.nn.softmax(self.ref['timm_vit']), atol=1e-5)
    # Without model_args the architecture name is the model (timm's ViT-B/16 here), checked
    # against the weights.
    cache = self.create_tempdir().full_path
    cache_commit(cache, 'timm/vit_base_patch16_224.augreg', {
        'config.json': json.dumps({'architecture': 'vit_base_patch16_224'}).encode(),
        'model.safetensors': _read(os.path.join(FIXTURES, 'timm_vit.safetensors'))})
    with hub_env(cache), self.assertRaisesRegex(
        ValueError, r"does not fit model 'ViT-B_16': patch size \(4, 4\) != \(16, 16\)"):
      load.load_model(None, 'hf-hub:timm/vit_base_patch16_224.augreg')

  def test_revision_picks_the_snapshot(self):
    with hub_env(self.cache):
      for name, commit in (('hf-hub:acme/vit-tiny', self.main_commit),
                           ('hf-hub:acme/vit-tiny@main', self.main_commit),
                           ('hf-hub:acme/vit-tiny@v1', self.hf_commit),
                           (f'hf-hub:acme/vit-tiny@{self.hf_commit}', self.hf_commit)):
        self.assertEqual(os.path.basename(hub.resolve(name)), commit, name)
      bias = lambda name: load.load_model(None, name).params['head']['bias']  # noqa: E731
      np.testing.assert_allclose(bias('hf-hub:acme/vit-tiny'),
                                 bias('hf-hub:acme/vit-tiny@v1') + 1.0, atol=1e-6)

  def test_fine_tuning_starts_from_a_hub_name(self):
    model = models.get_model('ViT-B_16', patches={'size': (4, 4)}, hidden_size=16, mlp_dim=32,
                             num_heads=2, num_layers=2, num_classes=3,
                             layer_norm_epsilon=1e-12)
    init = model.init(jax.random.PRNGKey(0), np.zeros((1, 16, 16, 3), np.float32))['params']
    config = models.get_model_config('ViT-B_16')
    config.transformer.num_heads = 2
    with hub_env(self.cache):
      params = checkpoint.load_pretrained(pretrained_path='hf-hub:acme/vit-tiny@v1',
                                          init_params=jax.device_get(init), model_config=config)
    want = load.load_model(None, os.path.join(FIXTURES, 'hf_classifier')).params
    np.testing.assert_allclose(params['embedding']['kernel'], want['embedding']['kernel'])
    self.assertEqual(params['head']['kernel'].shape, (16, 3))  # the new head, not the 5-way

  def test_bad_names_are_one_line(self):
    cases = (
        ('hf-hub:acme', ValueError, r"'hf-hub:acme' is no hub name: write hf-hub:ORG/NAME"),
        ('hf-hub:acme/missing', FileNotFoundError,
         r'hf-hub:acme/missing is not in the Hugging Face cache .* HF_HUB_OFFLINE=1 forbids'),
        ('hf-hub:acme/vit-tiny@v2', FileNotFoundError,
         r"revision 'v2' of acme/vit-tiny is not in the Hugging Face cache \(it holds main, "
         r'v1; 2 snapshots\), and HF_HUB_OFFLINE=1'),
        ('hf-hub:acme/card-only', ValueError,
         r'hf-hub:acme/card-only holds no checkpoint vit_jax reads .* it has README.md\.'),
    )
    with hub_env(self.cache):
      for name, error, message in cases:
        with self.assertRaisesRegex(error, message, msg=name) as ctx:
          load.resolve_checkpoint(name)
        self.assertNotIn('\n', str(ctx.exception))
        self.assertLess(len(str(ctx.exception)), 220, name)  # the one line stays short
        config = tiny_trained.config('/nonexistent', pretrained_path=name)
        with self.assertRaisesRegex(error, message, msg=name):
          precheck.check(config)

  def test_commands_say_it_in_one_line_before_tensorflow(self):
    for module, args in (
        ('vit_jax.main', ['--config=configs/quickstart.py',
                          '--config.pretrained_path=hf-hub:acme/missing', '--workdir=/tmp/x']),
        ('vit_jax.evaluate', ['--checkpoint=hf-hub:acme//x', '--dataset=mnist5k'])):
      with mock.patch.dict(os.environ, _env(self.cache)):
        result, stderr = test_entry.probe(module, *args)
      self.assertEqual(result['code'], 2, stderr)
      self.assertNotIn('tensorflow', result['loaded'], module)
      lines = stderr.strip().splitlines()
      self.assertLen(lines, 1, stderr)
      self.assertRegex(lines[0], r'(HF_HUB_OFFLINE=1|no hub name)', module)


class ExportToHubTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.params_path, _, _ = tiny_trained.trained()
    cls.workdir = os.path.dirname(cls.params_path)
    cls.out = os.path.join(absltest.get_default_test_tmpdir(), 'hub_export', 'tiny-mnist')
    shutil.rmtree(os.path.dirname(cls.out), ignore_errors=True)
    os.makedirs(os.path.dirname(cls.out))
    cls.result = commands.run(['python', '-m', 'vit_jax.export', f'--checkpoint={cls.workdir}',
                               f'--hub_dir={cls.out}'], env=_env(os.path.dirname(cls.out)))

  def test_hub_dir_is_a_transformers_repository_with_a_model_card(self):
    self.assertEqual(self.result.returncode, 0, self.result.stderr)
    self.assertEqual(sorted(os.listdir(self.out)), [
        'README.md', 'config.json', 'model.safetensors', 'preprocessor_config.json'])
    # The model card: huggingface_hub's parser reads the front matter.
    card = huggingface_hub.ModelCard.load(os.path.join(self.out, 'README.md'))
    self.assertEqual(card.data.library_name, 'transformers')
    self.assertEqual(card.data.datasets, ['mnist5k'])
    self.assertEqual(card.data.metrics, ['accuracy', 'loss'])
    self.assertIn('vit_jax', card.data.tags)
    records = rundir.read_metrics(self.workdir)
    accuracy = [r['accuracy_test'] for r in records if 'accuracy_test' in r][-1]
    self.assertIn(f'| accuracy_test | {accuracy:.4f} | 200 |', card.text)
    with open(os.path.join(self.out, 'config.json')) as f:
      self.assertEqual(json.load(f)['id2label']['3'], '3')  # mnist5k's class names

  def test_hub_dir_loads_back_from_the_folder_and_by_hub_name(self):
    want = checkpoint.load(self.params_path)
    same = lambda got: jax.tree.map(  # noqa: E731
        lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), got, want)
    same(load.load_model(None, self.out).params)
    cache = self.create_tempdir().full_path
    cache_commit(cache, 'me/tiny-mnist', _directory_files(self.out))
    with hub_env(cache):
      same(load.load_model(None, 'hf-hub:me/tiny-mnist').params)

  def test_hub_dir_loads_in_transformers(self):
    try:
      import torch  # pylint: disable=g-import-not-at-top
      import transformers  # pylint: disable=g-import-not-at-top
    except ImportError:
      self.skipTest('needs torch and transformers (pip install -e ".[interop]")')
    images = np.random.default_rng(0).uniform(-1, 1, (2, 28, 28, 3)).astype(np.float32)
    model = transformers.AutoModelForImageClassification.from_pretrained(self.out).eval()
    with torch.no_grad():
      theirs = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2))).logits
    loaded = load.load_model(None, self.params_path)
    ours = loaded.model.apply({'params': loaded.params}, images)
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), atol=1e-4, rtol=1e-4)

  def test_push_name_must_be_org_and_name(self):
    for name in ('tiny', 'me/tiny/x', ''):
      with self.assertRaisesRegex(ValueError, 'name the repository ORG/NAME'):
        hub.check_push(name)

  def test_hub_dir_must_be_new_or_empty(self):
    hub.check_folder(os.path.join(self.create_tempdir().full_path, 'new'))
    hub.check_folder(self.create_tempdir().full_path)  # empty
    with self.assertRaisesRegex(FileExistsError, 'it exists and is not an empty directory'):
      hub.check_folder(self.out)

  def test_push_offline_is_one_line_before_anything_loads(self):
    workdir, _ = tiny_trained.untrained()
    with mock.patch.dict(os.environ, _env(self.create_tempdir().full_path)):
      result, stderr = test_entry.probe('vit_jax.export', f'--checkpoint={workdir}',
                                        '--push_to_hub=me/tiny')
    self.assertEqual(result['code'], 2, stderr)
    self.assertNotIn('tensorflow', result['loaded'])
    self.assertRegex(stderr.strip(), r'^vit_jax.export: error: --push_to_hub=me/tiny: '
                     'HF_HUB_OFFLINE=1 forbids uploading; unset it, or write the folder with '
                     r'--hub_dir and upload it later\.$')

  def test_export_flag_mistakes(self):
    workdir, _ = tiny_trained.untrained()
    taken = self.create_tempdir().full_path
    open(os.path.join(taken, 'file'), 'w').close()
    cases = {'it exists and is not an empty directory': [f'--hub_dir={taken}'],
             'Nothing to write: pass --format and --output': [],
             '--format and --output go together': ['--format=onnx'],
             "--push_to_hub='tiny': name the repository ORG/NAME": ['--push_to_hub=tiny']}
    # One process checks them all as the export command's early check does.
    out = subprocess.run(
        [sys.executable, '-c', _CHECK_EXPORT, json.dumps(
            [[f'--checkpoint={workdir}', *args] for args in cases.values()])],
        capture_output=True, text=True, env=_env(taken), cwd=REPO, timeout=300, check=True)
    for message, got in zip(cases, json.loads(out.stdout.strip().splitlines()[-1])):
      self.assertIn(message, got)
    self.assertEqual(os.listdir(taken), ['file'])


if __name__ == '__main__':
  absltest.main()
