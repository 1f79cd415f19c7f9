"""Tests for the metric writers: metrics.jsonl next to TensorBoard events."""
import json
import math
import os

from absl.testing import absltest

from vit_jax.train import writers as metrics


class JsonlWriterTest(absltest.TestCase):

  def test_append_and_rewrite_modes_write_the_same_file(self):
    for rewrite in (False, True):
      workdir = self.create_tempdir().full_path
      path = os.path.join(workdir, metrics.METRICS_FILE)
      metrics.JsonlWriter(path, rewrite=rewrite).write_scalars(
          1, {'train_loss': 2.5})
      # A resumed run keeps what the first one wrote.
      writer = metrics.JsonlWriter(path, rewrite=rewrite)
      writer.write_scalars(2, {'train_loss': float('nan'), 'mfu': 0.5})
      self.assertEqual(metrics.read_metrics(workdir), [
          {'step': 1, 'train_loss': 2.5},
          {'step': 2, 'train_loss': 'nan', 'mfu': 0.5},
      ])
      with open(path) as f:
        for line in f:
          json.loads(line)  # one valid JSON object per line

  def test_only_process_zero_writes_files(self):
    workdir = self.create_tempdir().full_path
    writer = metrics.make_writer(workdir, process_index=1)
    writer.write_scalars(1, {'train_loss': 1.0})
    writer.flush()
    self.assertEqual(os.listdir(workdir), [])
    writer = metrics.make_writer(workdir, process_index=0)
    writer.write_scalars(1, {'train_loss': 1.0})
    writer.flush()
    files = os.listdir(workdir)
    self.assertIn(metrics.METRICS_FILE, files)
    self.assertTrue(any(f.startswith('events.out.tfevents') for f in files))
    self.assertTrue(math.isclose(
        metrics.read_metrics(workdir)[0]['train_loss'], 1.0))


if __name__ == '__main__':
  absltest.main()
