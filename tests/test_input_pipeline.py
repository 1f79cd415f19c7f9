"""Tests of the tf.data pipelines (vit_jax.data.pipeline) and the shard read plans."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from tests import tfds_testdata
from vit_jax.data import sources as datasets
from vit_jax.data import pipeline as input_pipeline
from vit_jax.parallel import sharding
from vit_jax.data import plan
from vit_jax.data import preprocess
from vit_jax.data import reader

# 64 train / 16 test images of 8x8: with batch 8 and 4 shards an epoch is 8 steps.
TINY = 'synthetic/8px_3cls_64train_16test'


def _mesh(n: int) -> jax.sharding.Mesh:
  return jax.sharding.Mesh(np.array(jax.devices()[:n]).reshape(n, 1), ('data', 'fsdp'))


def _tiny(**overrides):
  defaults = {'batch': 8, 'data_shards': 4, 'shuffle_buffer': 24, 'pp.crop': 8,
              'pp.resize': 8, 'pp.train': 'pretrain'}
  return tfds_testdata.config(TINY, **{**defaults, **overrides})


def _batches(config, shards, start_step=0, count=1):
  it = input_pipeline.train_dataset(config, shards, start_step).as_numpy_iterator()
  return [next(it) for _ in range(count)]


class PlanTest(absltest.TestCase):

  def test_epochs_visit_every_example_once(self):
    n, size = 23, 5
    segments = [plan.segment(n, size, 7, 1, q) for q in range(3 * plan.num_segments(n, size))]
    offsets = np.concatenate([s.offsets() for s in segments])
    for epoch in range(3):
      np.testing.assert_array_equal(np.sort(offsets[epoch * n:(epoch + 1) * n]), np.arange(n))
    self.assertFalse(np.array_equal(offsets[:n], offsets[n:2 * n]))  # Reshuffled.
    positions = [s.position for s in segments]
    np.testing.assert_array_equal(positions, np.cumsum([0] + [len(s.order) for s in
                                                              segments[:-1]]))

  def test_locate_finds_every_position(self):
    n, size = 23, 5
    segments = [plan.segment(n, size, 7, 1, q) for q in range(10)]
    stream = np.concatenate([s.offsets() for s in segments])
    for position in range(40):
      q, skip = plan.locate(n, size, 7, 1, position)
      self.assertEqual(plan.segment(n, size, 7, 1, q).offsets()[skip], stream[position])

  def test_shard_bounds(self):
    self.assertEqual(plan.shard_bounds(10, 4), [(0, 2), (2, 5), (5, 7), (7, 10)])
    with self.assertRaisesRegex(ValueError, '3 examples, fewer than config.data_shards=4'):
      plan.shard_bounds(3, 4)


class ReaderTest(absltest.TestCase):

  def test_pieces_of_a_range(self):
    files = reader.SplitFiles(paths=('a', 'b'), skips=(0, 5), takes=(10, 10))
    self.assertEqual(files.pieces(8, 13), (['a', 'b'], [8, 5], [2, 3]))
    self.assertEqual(files.pieces(12, 20), (['b'], [7], [8]))

  def test_read_range_follows_the_tfds_order(self):
    builder = datasets.prepare(datasets.resolve('mnist5k'), tfds_testdata.data_dir())
    split = 'train[5:25]+test[:7]'
    files = reader.split_files(builder, split)
    self.assertEqual(files.num_examples, 27)
    records = list(reader.read_range(files, 3, 24).as_numpy_iterator())
    parse = builder.info.features.deserialize_example
    labels = [int(parse(r)['label']) for r in records]
    # TFDS interleaves files unless told to read them one after the other.
    in_order = tfds.ReadConfig(interleave_cycle_length=1)
    expected = [int(ex['label']) for ex in builder.as_dataset(
        split=split, shuffle_files=False, read_config=in_order).as_numpy_iterator()][3:24]
    self.assertEqual(labels, expected)


class TrainPipelineTest(parameterized.TestCase):

  @parameterized.parameters('pretrain', 'finetune', 'finetune_inception')
  def test_global_batches_per_recipe(self, recipe):
    config = tfds_testdata.config('mnist5k', **{'pp.train': recipe})
    mesh = _mesh(8)
    batch = next(input_pipeline.make_train_iterator(config, mesh))
    self.assertEqual(set(batch), {'image', 'label'})
    image, label = batch['image'], batch['label']
    self.assertEqual((image.shape, image.dtype), ((32, 16, 16, 3), np.float32))
    self.assertEqual((label.shape, label.dtype), ((32, 10), np.float32))
    self.assertEqual(image.sharding, sharding.batch_sharding(mesh))
    self.assertEqual(image.sharding.spec, jax.sharding.PartitionSpec(('data', 'fsdp')))
    image = np.asarray(image)
    self.assertBetween(image.min(), -1.0, -0.9)  # MNIST backgrounds are black...
    self.assertBetween(image.max(), 0.9, 1.0)    # ...and strokes white.
    np.testing.assert_array_equal(np.asarray(label).sum(1), np.ones(32))

  def test_resumed_stream_equals_uninterrupted_stream(self):
    # Resume mid-epoch, mid-segment; 14 steps cross the next epoch boundary (8 steps).
    config = _tiny()
    shards = list(range(4))
    full = _batches(config, shards, 0, 25)
    resumed = _batches(config, shards, 11, 14)
    for a, b in zip(full[11:], resumed):
      np.testing.assert_array_equal(a['index'], b['index'])
      np.testing.assert_array_equal(a['image'], b['image'])
      np.testing.assert_array_equal(a['label'], b['label'])

  def test_deterministic_and_seeded(self):
    a, b = _batches(_tiny(), [0, 1, 2, 3], 0, 2), _batches(_tiny(), [0, 1, 2, 3], 0, 2)
    c = _batches(_tiny(seed=1), [0, 1, 2, 3], 0, 2)
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x['image'], y['image'])
    self.assertFalse(np.array_equal(a[0]['index'], c[0]['index']))

  def test_one_epoch_covers_the_split_once_and_processes_are_disjoint(self):
    config = _tiny()
    # Two simulated processes: process p holds virtual shards [2p, 2p + 2).
    parts = [_batches(config, shards, 0, 8) for shards in ([0, 1], [2, 3])]
    seen = [np.concatenate([b['index'] for b in part]) for part in parts]
    self.assertEmpty(np.intersect1d(seen[0], seen[1]))
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(64))

  def test_global_batch_is_the_same_on_any_process_count(self):
    config = _tiny(**{'pp.mixup': 0.5, 'pp.label_smoothing': 0.1})
    one = _batches(config, [0, 1, 2, 3], 5, 2)
    # Four simulated processes, one virtual shard each.
    parts = [_batches(config, [p], 5, 2) for p in range(4)]
    for step in range(2):
      for key in ('image', 'label', 'index', 'ratio'):
        np.testing.assert_array_equal(
            one[step][key], np.concatenate([part[step][key] for part in parts]))

  def test_batch_ops_warp_each_shard_block_whatever_the_process_count(self):
    warp = "random_affine(20, 0.2, (0.8, 1.2), interpolation='bilinear')"
    config = _tiny(**{'pp.train': 'pretrain|' + warp})
    one = _batches(config, [0, 1, 2, 3], 0, 10)
    parts = [_batches(config, [p], 0, 10) for p in range(4)]
    resumed = _batches(config, [0, 1, 2, 3], 7, 3)
    plain = _batches(_tiny(), [0, 1, 2, 3], 0, 10)  # the same per-example ops, no warp
    batch_ops = preprocess.train_chains(config.pp)[1]
    fold_in = tf.random.experimental.stateless_fold_in
    for step in range(10):
      self.assertEqual(set(one[step]), set(plain[step]))
      np.testing.assert_array_equal(one[step]['index'], plain[step]['index'])
      np.testing.assert_array_equal(
          one[step]['image'], np.concatenate([part[step]['image'] for part in parts]))
      for shard in range(4):  # block seed: (seed, 1) folded with the shard, then the step
        rows = slice(2 * shard, 2 * shard + 2)
        seed = fold_in(fold_in(tf.constant([config.seed, 1], tf.int64), np.int64(shard)),
                       np.int64(step))
        np.testing.assert_array_equal(one[step]['image'][rows],
                                      batch_ops(tf.constant(plain[step]['image'][rows]), seed))
    self.assertFalse(np.array_equal(one[0]['image'], plain[0]['image']))
    for a, b in zip(one[7:], resumed):
      np.testing.assert_array_equal(a['image'], b['image'])

  def test_global_arrays_match_across_meshes(self):
    config = _tiny(**{'pp.mixup': 0.5})
    a = next(input_pipeline.make_train_iterator(config, _mesh(8), start_step=3))
    b = next(input_pipeline.make_train_iterator(config, _mesh(2), start_step=3))
    for key in ('image', 'label'):
      np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))

  def test_mixup_and_label_smoothing(self):
    config = _tiny(**{'pp.mixup': 1.0, 'pp.label_smoothing': 0.1})
    batch = next(input_pipeline.make_train_iterator(config, _mesh(4)))
    label = np.asarray(batch['label'])
    np.testing.assert_allclose(label.sum(1), np.ones(8), rtol=1e-5)
    self.assertGreater(np.sum((label > 0.05) & (label < 0.9)), 0)  # Some rows are mixed.
    self.assertBetween(float(batch['image'].min()), -1.0, 1.0)
    self.assertBetween(float(batch['image'].max()), -1.0, 1.0)

  def test_cutmix_pastes_the_partner_box_and_weighs_labels_by_area(self):
    config = _tiny(**{'pp.cutmix': 1.0, 'pp.label_smoothing': 0.1, 'pp.crop': 8})
    host = _batches(config, [0, 1, 2, 3])[0]
    out = input_pipeline.finalize(host, 2)  # blocks of 2 rows: each row's partner is the other
    image = input_pipeline.value_range(host['image'])
    partner = image.reshape(4, 2, 8, 8, 3)[:, ::-1].reshape(image.shape)
    boxes = host['box']
    for row in range(8):
      top, left, h, w = boxes[row]
      inside = np.zeros((8, 8), bool)
      inside[top:top + h, left:left + w] = True
      np.testing.assert_allclose(out['image'][row][inside], partner[row][inside])
      np.testing.assert_allclose(out['image'][row][~inside], image[row][~inside])
      # The label weight is the uncovered area, applied to the smoothed targets.
      self.assertAlmostEqual(float(host['ratio'][row]), 1 - inside.mean(), places=6)
    np.testing.assert_allclose(np.asarray(out['label']).sum(1), np.ones(8), rtol=1e-5)
    self.assertGreater(np.mean(boxes[:, 2] * boxes[:, 3]), 0)  # some boxes are not empty
    # One draw per shard and step: the two rows of a shard share it.
    np.testing.assert_array_equal(boxes[0::2], boxes[1::2])

  def test_cutmix_and_mixup_switch(self):
    both = {'pp.cutmix': 1.0, 'pp.mixup': 0.8}
    all_cut = _batches(_tiny(**both, **{'pp.cutmix_switch_prob': 1.0}), [0, 1, 2, 3], 0, 3)
    all_mix = _batches(_tiny(**both, **{'pp.cutmix_switch_prob': 0.0}), [0, 1, 2, 3], 0, 3)
    for cut, mix in zip(all_cut, all_mix):
      np.testing.assert_array_equal(cut['image_ratio'], np.ones(8))
      np.testing.assert_array_equal(mix['box'], np.zeros((8, 4)))
      np.testing.assert_array_equal(mix['image_ratio'], mix['ratio'])
    switched = _batches(_tiny(**both), [0, 1, 2, 3], 0, 8)
    kinds = {float(r) == 1.0 for b in switched for r in b['image_ratio']}
    self.assertEqual(kinds, {True, False})  # both kinds of draw at the default 0.5

  def test_mixing_settings_out_of_range(self):
    for key, value, message in (('pp.cutmix', -1.0, r'config.pp.cutmix=-1.0 must be >= 0'),
                                ('pp.cutmix_switch_prob', 1.5,
                                 r'config.pp.cutmix_switch_prob=1.5 must be in \[0, 1\]')):
      with self.assertRaisesRegex(ValueError, message):
        input_pipeline.train_dataset(_tiny(**{key: value}), [0])

  def test_repeated_augmentation_copies_each_image_and_resumes_exactly(self):
    config = _tiny(batch=12, **{'pp.repeats': 3})  # 3 rows per shard: one image, 3 copies
    run = _batches(config, [0, 1, 2, 3], 0, 4)
    for batch in run:
      index = batch['index'].reshape(-1, 3)
      np.testing.assert_array_equal(index, np.repeat(index[:, :1], 3, axis=1))
      copies = batch['image'].reshape(-1, 3, 8, 8, 3)
      self.assertFalse(all(np.array_equal(c[0], c[1]) and np.array_equal(c[1], c[2])
                           for c in copies))  # augmented apart
    resumed = _batches(config, [0, 1, 2, 3], 2, 2)
    for a, b in zip(run[2:], resumed):
      for key in ('image', 'index'):
        np.testing.assert_array_equal(a[key], b[key])
    # An epoch of the split reads each image once per 3 copies: 64 images in 16 steps.
    seen = np.concatenate([b['index'] for b in _batches(config, [0, 1, 2, 3], 0, 16)])
    self.assertEqual(len(np.unique(seen)), 64)

  def test_repeated_copies_are_not_mixed_with_each_other(self):
    config = _tiny(batch=24, **{'pp.repeats': 3, 'pp.mixup': 0.5})  # 6 rows per shard
    host = _batches(config, [0, 1, 2, 3])[0]
    out = input_pipeline.finalize(host, 6, 3)
    partner = np.roll(host['index'].reshape(4, 6), 3, axis=1).reshape(-1)
    self.assertTrue(np.all(partner != host['index']))
    lam = host['ratio'][:, None, None, None]
    image = input_pipeline.value_range(host['image'])
    mixed = lam * image + (1 - lam) * np.roll(image.reshape(4, 6, 8, 8, 3), 3, 1).reshape(
        image.shape)
    np.testing.assert_allclose(out['image'], mixed, rtol=1e-5, atol=1e-6)

  def test_copies_may_span_steps_and_still_resume_exactly(self):
    config = _tiny(**{'pp.repeats': 3})  # 2 rows per shard: copies run across steps
    run = _batches(config, [0, 1], 0, 5)
    shard0 = np.concatenate([b['index'][:2] for b in run])
    np.testing.assert_array_equal(shard0[:9], np.repeat(shard0[0:9:3], 3))
    for start in (1, 2):  # resumed mid-copies
      resumed = _batches(config, [0, 1], start, 5 - start)
      for a, b in zip(run[start:], resumed):
        for key in ('image', 'index'):
          np.testing.assert_array_equal(a[key], b[key])

  def test_bad_repeats_are_one_line(self):
    with self.assertRaisesRegex(ValueError, 'config.pp.repeats=0 must be a positive integer'):
      input_pipeline.train_dataset(_tiny(**{'pp.repeats': 0}), [0])
    with self.assertRaisesRegex(ValueError, r'config.pp.repeats=2 with Mixup/CutMix needs at '
                                r'least 4 rows per data shard \(.* = 2\)'):
      input_pipeline.train_dataset(_tiny(**{'pp.repeats': 2, 'pp.mixup': 0.8}), [0])

  def test_multi_hot_targets(self):
    batch = _batches(_tiny(**{'pp.multi_hot': True}), [0, 1, 2, 3])[0]
    np.testing.assert_array_equal(batch['label'].sum(1), np.ones(8))

  def test_cache_gives_the_same_stream(self):
    # Cached records are read per run of adjacent shards and parsed once for all shards
    # (reader.cache_shards); the batches stay bit-identical, labels (one-hot per batch,
    # smoothed), mixing weights and indices included. Shards 0 and 2, 3: two runs. Label
    # lists (multi-hot) keep the serialized records instead.
    mixed = {'pp.label_smoothing': 0.1, 'pp.mixup': 0.5}
    for overrides, shards in (({}, [0, 2, 3]), (mixed, [0, 1, 2, 3]),
                              ({'pp.multi_hot': True}, [0, 2, 3]),
                              ({'data_shards': 1, 'batch': 4}, [0])):
      a = _batches(_tiny(**overrides), shards, 9, 3)
      b = _batches(_tiny(cache=True, **overrides), shards, 9, 3)
      for x, y in zip(a, b):
        self.assertEqual(sorted(x), sorted(y))
        for key in x:
          np.testing.assert_array_equal(x[key], y[key], err_msg=f'{overrides} {key}')
      if overrides is mixed:
        self.assertAlmostEqual(float(b[0]['label'].max()), 0.9 + 0.1 / 3, places=6)

  def test_whole_decoded_images_are_cached_decoded_with_the_same_stream(self):
    for train in ('finetune', "finetune|random_affine(20, 0.2, interpolation='bilinear')"):
      config = _tiny(**{'pp.train': train, 'pp.pad': 1})
      a = _batches(config, [0, 2, 3], 9, 3)
      for mb in (1024, 0):  # 0: too big to keep decoded, the bytes are kept
        b = _batches(_tiny(cache=True, cache_decoded_mb=mb, **{'pp.train': train,
                                                               'pp.pad': 1}), [0, 2, 3], 9, 3)
        for x, y in zip(a, b):
          self.assertEqual(sorted(x), sorted(y))
          for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=f'{train} {mb} {key}')

  def test_bad_cache_decoded_mb_is_one_line(self):
    with self.assertRaisesRegex(ValueError, r"config.cache_decoded_mb=-1 must be a number of "
                                r"MB >= 0"):
      input_pipeline.train_dataset(_tiny(cache=True, cache_decoded_mb=-1), [0])

  def test_cache_shards_decodes_when_one_shape_fits(self):
    config = _tiny()
    spec = datasets.resolve(TINY)
    builder = datasets.prepare(spec, config.data_dir)
    files = reader.split_files(builder, 'train')
    parse = input_pipeline._parser(builder, spec)
    decode = lambda data: preprocess.decode_op(data, config.pp)  # noqa: E731
    encoded = reader.cache_shards(files, [(0, 10), (10, 64)], parse)
    decoded = reader.cache_shards(files, [(0, 10), (10, 64)], parse, decode, 64 * 8 * 8 * 3)
    self.assertEqual([len(c[0]) for c in decoded], [10, 54])
    for (bytes_, labels), (images, same_labels) in zip(encoded, decoded):
      self.assertEqual((images.dtype, images.shape[1:]), (np.uint8, (8, 8, 3)))
      np.testing.assert_array_equal(labels, same_labels)
      np.testing.assert_array_equal(images[3], decode(bytes_[3]))
    too_big = reader.cache_shards(files, [(0, 64)], parse, decode, 64 * 8 * 8 * 3 - 1)
    self.assertEqual(too_big[0][0].dtype, object)
    shapes = np.array([tf.io.encode_png(np.zeros(s, np.uint8)).numpy()
                       for s in ((8, 8, 3), (8, 9, 3))], object)
    self.assertIsNone(reader.decode_all(shapes, decode, 1 << 20))

  def test_parse_all_keeps_label_lists_per_example(self):
    records = np.array([b'ab', b'c'], object)
    parsed = reader.parse_all(records, lambda r: (r, tf.cast(tf.strings.length(r), tf.int64)))
    np.testing.assert_array_equal(parsed[1], [2, 1])
    self.assertEqual(list(parsed[0]), [b'ab', b'c'])
    self.assertIsNone(reader.parse_all(
        records, lambda r: (r, tf.fill([tf.strings.length(r)], tf.constant(1, tf.int64)))))
    empty = reader.parse_all(np.zeros([0], object), lambda r: (r, tf.constant(0, tf.int64)))
    self.assertEqual((empty[0].shape, empty[1].shape), ((0,), (0,)))

  def test_image_folder_dataset(self):
    root = tfds_testdata.tempdir(self, 'folder')
    tfds_testdata.make_image_folder(root, {'train': {'a': 6, 'b': 6}, 'test': {'a': 3}})
    config = tfds_testdata.config(f'folder:{root}', batch=8, data_shards=2,
                                  data_dir=tfds_testdata.tempdir(self))
    batch = next(input_pipeline.make_train_iterator(config, _mesh(2)))
    self.assertEqual(batch['image'].shape, (8, 16, 16, 3))
    self.assertEqual(batch['label'].shape, (8, 2))
    total = sum(float(b['mask'].sum()) for b in input_pipeline.make_eval_iterator(
        config, _mesh(2)))
    self.assertEqual(total, 3)

  def test_bad_batch_sizes_name_the_numbers(self):
    with self.assertRaisesRegex(ValueError, 'batch=12 is not divisible by the 8 devices'):
      input_pipeline.make_train_iterator(_tiny(batch=12), _mesh(8))
    with self.assertRaisesRegex(ValueError, 'batch=8 is not divisible by .*data_shards=3'):
      input_pipeline.make_train_iterator(_tiny(data_shards=3), _mesh(2))
    with self.assertRaisesRegex(ValueError, 'batch_eval=12 is not divisible by the 8'):
      input_pipeline.make_eval_iterator(_tiny(batch_eval=12), _mesh(8))
    with self.assertRaisesRegex(ValueError, r'rows \[0, 4\).*whole data shards of 8 rows'):
      input_pipeline._groups_of_rows([(0, 4)], 8, 'data shards')

  def test_bad_recipe_and_sizes(self):
    with self.assertRaisesRegex(ValueError, "pp.train='inception'"):
      input_pipeline.train_dataset(_tiny(**{'pp.train': 'inception'}), [0])
    with self.assertRaisesRegex(ValueError, 'pp.resize=8 is smaller than config.pp.crop=9'):
      input_pipeline.train_dataset(_tiny(**{'pp.train': 'finetune', 'pp.crop': 9}), [0])
    # Padding makes room for the crop; a negative pad is refused.
    input_pipeline.train_dataset(
        _tiny(**{'pp.train': 'finetune', 'pp.crop': 10, 'pp.pad': 1}), [0])
    with self.assertRaisesRegex(ValueError, r'config.pp.pad=-1: use an integer >= 0'):
      input_pipeline.train_dataset(_tiny(**{'pp.train': 'finetune', 'pp.pad': -1}), [0])
    with self.assertRaisesRegex(ValueError, '64 examples, fewer than config.data_shards=128'):
      input_pipeline.train_dataset(_tiny(batch=128, data_shards=128), [0])


class EvalPipelineTest(parameterized.TestCase):

  @parameterized.parameters(8, 2)
  def test_mnist5k_eval_counts_every_example_once(self, devices):
    # 48 does not divide 1,000: the last batch is padded and masked.
    config = tfds_testdata.config('mnist5k')
    ev = input_pipeline.make_eval_iterator(config, _mesh(devices))
    masks, labels = [], []
    for batch in ev:
      self.assertEqual(set(batch), {'image', 'label', 'mask'})
      self.assertEqual(batch['image'].shape, (48, 16, 16, 3))
      masks.append(np.asarray(batch['mask']))
      labels.append(np.asarray(batch['label']))
    self.assertEqual(len(masks), len(ev))
    mask = np.concatenate(masks)
    self.assertEqual(mask.sum(), 1000)
    label = np.concatenate(labels)
    np.testing.assert_array_equal(label[mask == 0], 0)
    np.testing.assert_array_equal(label.sum(0), np.full(10, 100))  # 100 test digits a class.
    self.assertEqual(sum(float(b['mask'].sum()) for b in ev), 1000)  # A second full pass.

  def test_simulated_processes_split_the_eval_set(self):
    config = tfds_testdata.config('mnist5k', batch_eval=40)
    parts = [input_pipeline.eval_dataset(config, None, slots, 4) for slots in ([0, 1], [2, 3])]
    self.assertEqual(parts[0][1], parts[1][1])  # Both processes run the same batch count.
    index = [np.concatenate([b['index'] for b in ds.as_numpy_iterator()]) for ds, _ in parts]
    real = [i[i >= 0] for i in index]
    self.assertEmpty(np.intersect1d(real[0], real[1]))
    np.testing.assert_array_equal(np.sort(np.concatenate(real)), np.arange(1000))

  def test_numpy_eval_preprocessing_matches_the_pipeline(self):
    config = tfds_testdata.config('mnist5k', batch_eval=8)
    batch = next(input_pipeline.eval_dataset(config, None, [0], 1)[0].as_numpy_iterator())
    builder = datasets.prepare(datasets.resolve('mnist5k'), config.data_dir)
    first = next(builder.as_dataset(split='test', shuffle_files=False).as_numpy_iterator())
    self.assertEqual(batch['index'][0], 0)
    out = input_pipeline.preprocess_for_eval_numpy(first['image'], config)
    self.assertEqual((out.shape, out.dtype), ((16, 16, 3), np.float32))
    np.testing.assert_array_equal(out, input_pipeline.value_range(batch['image'][0]))
    with self.assertRaisesRegex(ValueError, 'uint8'):
      input_pipeline.preprocess_for_eval_numpy(np.zeros((4, 4), np.float32), config)

  def test_get_dataset_info(self):
    info = datasets.get_dataset_info(tfds_testdata.config('mnist5k'))
    self.assertEqual((info.num_train, info.num_eval, info.num_classes), (4000, 1000, 10))
    self.assertEqual(info.label_names, [str(i) for i in range(10)])


if __name__ == '__main__':
  absltest.main()
