"""Executes notebooks/vit_jax.ipynb headless (smoke mode), so the notebook cannot rot."""
import os

from absl.testing import absltest
import nbclient
import nbformat

from tests import tfds_testdata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(REPO, 'notebooks', 'vit_jax.ipynb')


class NotebookTest(absltest.TestCase):

  def test_notebook_runs_and_shows_pictures(self):
    workdir = self.create_tempdir().full_path
    # The notebook reads its datasets from WORKDIR/tfds: the session's prepared ones (the
    # data stage's lock guards a preparation), not a second preparation of each.
    os.symlink(tfds_testdata.data_dir(), os.path.join(workdir, 'tfds'))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    os.environ['VIT_JAX_NOTEBOOK_SMOKE'] = '1'
    os.environ['VIT_JAX_NOTEBOOK_WORKDIR'] = workdir
    try:
      # The kernel starts in the repository root, where vit_jax and configs import.
      client = nbclient.NotebookClient(nb, timeout=300, kernel_name='python3',
                                       resources={'metadata': {'path': REPO}})
      client.execute()
    finally:
      del os.environ['VIT_JAX_NOTEBOOK_SMOKE']
      del os.environ['VIT_JAX_NOTEBOOK_WORKDIR']
    outputs = [o for cell in nb.cells if cell.cell_type == 'code'
               for o in cell.get('outputs', [])]
    self.assertFalse([o for o in outputs if o.output_type == 'error'])
    text = ''.join(o.get('text', '') for o in outputs if o.output_type == 'stream')
    self.assertIn('test accuracy after 20 steps', text)
    self.assertIn('fewshot/digits_5shot', text)
    self.assertIn('fine-tuning steps', text)
    pictures = [o for o in outputs if 'image/png' in o.get('data', {})]
    self.assertGreaterEqual(len(pictures), 3)
    self.assertTrue(os.path.exists(os.path.join(workdir, 'figures',
                                                'posemb_similarity.png')))


if __name__ == '__main__':
  absltest.main()
