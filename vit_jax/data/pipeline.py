"""tf.data pipelines that feed global jax.Arrays: the training stream and evaluation passes.

Training stream: exact, topology-invariant resumption.
  The training split is cut into V = config.data_shards contiguous virtual shards. Each shard
  has its own endless stream of examples whose order is a pure function of (seed, shard,
  epoch) (vit_jax/data/plan.py), and every example's augmentation is seeded by (seed, shard,
  stream position). The global batch of step k holds, for v = 0..V-1 in order, the batch/V
  examples at stream positions [k*batch/V, (k+1)*batch/V) of shard v. A process builds only
  the shards of the batch rows its devices hold (process p of P: shards [p*V/P, (p+1)*V/P)),
  so the global batch of step k is the same array for every process count dividing V, and a
  run resumed at step k (start_step=k) starts every shard at position k*batch/V: it reads one
  in-memory shuffle segment per shard and decodes nothing it skips.

Evaluation: every example exactly once.
  The eval split is cut into one contiguous chunk per data-parallel device; each chunk is
  padded to the same number of batches with `mask` 0 rows (label all zero), so metrics
  summed over mask count each example once, with no example dropped.

Memory: a process holds up to two shuffle segments per virtual shard it reads, i.e. about
2 * config.shuffle_buffer / process_count encoded records (ImageNet, 50k buffer, one host:
~11 GB).

Hosts send uint8 images; the map to float32 in [-1, 1] and mixup run on the devices
(`finalize`). TensorFlow never sees an accelerator: GPUs are hidden from it before any
pipeline is built.
"""
import collections
import functools
from typing import Iterator, Optional

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vit_jax.data import multicrop
from vit_jax.data import plan
from vit_jax.data import preprocess
from vit_jax.data import reader
from vit_jax.data import label_sets
from vit_jax.data import sources
from vit_jax.data import view_counts
from vit_jax.parallel import sharding as sharding_lib


def _hide_accelerators() -> None:
  """Hides GPUs/TPUs from TensorFlow, so it never takes accelerator memory from JAX."""
  for kind in ('GPU', 'TPU'):
    try:
      tf.config.set_visible_devices([], kind)
    except (RuntimeError, ValueError):
      pass  # Devices already initialised (TF used earlier) or the kind does not exist.


def local_row_runs(sharding: jax.sharding.Sharding, batch: int) -> list[tuple[int, int]]:
  """Returns the [start, end) runs of batch rows held by this process's devices, ascending."""
  slices = sorted({(s[0].start or 0, batch if s[0].stop is None else s[0].stop)
                   for s in sharding.addressable_devices_indices_map((batch,)).values()})
  runs = []
  for a, b in slices:
    if runs and a <= runs[-1][1]:
      runs[-1] = (runs[-1][0], max(b, runs[-1][1]))
    else:
      runs.append((a, b))
  return runs


def _check_divisible(name: str, batch: int, mesh: jax.sharding.Mesh) -> None:
  n = mesh.size
  if batch % jax.process_count():
    raise ValueError(f'config.{name}={batch} is not divisible by the number of processes '
                     f'({jax.process_count()})')
  if batch % n:
    raise ValueError(f'config.{name}={batch} is not divisible by the {n} devices of the mesh')


def _groups_of_rows(runs: list[tuple[int, int]], group: int, what: str) -> list[int]:
  """Returns the ids of the `group`-row blocks covering the runs; they must align."""
  ids = []
  for a, b in runs:
    if a % group or b % group:
      raise ValueError(
          f'This process holds batch rows [{a}, {b}), which do not split into whole {what} '
          f'of {group} rows: choose a config.data_shards that is a multiple of the number '
          f'of processes ({jax.process_count()}) and divides config.batch')
    ids.extend(range(a // group, b // group))
  return ids


def _source(config, label_key: str = '', train: bool = True):
  """Returns (spec, prepared builder, info) of config.dataset (labels from `label_key`).

  train=False: only evaluated, so its training split is not read.
  """
  spec = sources.resolve(config.dataset, label_key)
  builder = sources.prepare(spec, config.get('data_dir'), config.get('manual_dir'))
  return spec, builder, sources.info_from_builder(config, spec, builder, train)


def _parser(builder, spec):
  """Returns record -> (encoded image bytes, int64 label) for a TFDS builder."""
  _hide_accelerators()
  features = builder.info.features
  if spec.image_key not in features:
    raise ValueError(f'{builder.name} has no feature {spec.image_key!r}; it has '
                     f'{", ".join(features.keys())}')
  if not spec.label_fn and spec.label_key not in features:
    raise ValueError(f'{builder.name} has no label feature {spec.label_key!r}; it has '
                     f'{", ".join(features.keys())}')
  # Images stay encoded here: training decodes only the crop window later.
  decoders = {k: tfds.decode.SkipDecoding() for k, f in features.items()
              if isinstance(f, tfds.features.Image)}
  label_fn = (preprocess.LABEL_FNS[spec.label_fn] if spec.label_fn
              else lambda ex: ex[spec.label_key])

  def parse(record):
    ex = features.deserialize_example(record, decoders=decoders)
    return ex[spec.image_key], tf.cast(label_fn(ex), tf.int64)
  return parse


def _ceil_div(a: int, b: int) -> int:
  return -(-a // b)


def _options():
  options = tf.data.Options()
  options.deterministic = True
  options.experimental_optimization.map_parallelization = True
  return options


def _repeated(stream: tf.data.Dataset, repeats: int) -> tf.data.Dataset:
  """Each element `repeats` times in a row, at stream positions position * repeats + copy.

  Repeated augmentation (DeiT): the copies are augmented apart because an example's seed is
  its stream position, and a resumed run sees the same copies.
  """
  def copies(el):
    position = el['position'] * repeats + tf.range(repeats, dtype=tf.int64)
    return tf.data.Dataset.from_tensor_slices(dict(
        {k: tf.repeat(v[None], repeats) for k, v in el.items() if k != 'position'},
        position=position))
  return stream.flat_map(reader.traced(copies))


def check_train_config(config, info) -> None:
  """One-line errors for training preprocessing and sharding settings that cannot work."""
  pp = config.pp
  pad = pp.get('pad', 0)
  if not isinstance(pad, int) or pad < 0:
    raise ValueError(f'config.pp.pad={pad!r}: use an integer >= 0 (pixels).')
  if pp.train == 'finetune' and pp.resize + 2 * pad < pp.crop:
    raise ValueError(f'config.pp.resize={pp.resize} is smaller than config.pp.crop='
                     f'{pp.crop} (with config.pp.pad={pad} on each side): the finetune '
                     'recipe crops pp.crop out of pp.resize + 2 x pp.pad')
  if not 0 < pp.min_area <= 1:
    raise ValueError(f'config.pp.min_area={pp.min_area} must be in (0, 1]')
  if pp.num_channels not in (1, 3):
    raise ValueError(f'config.pp.num_channels={pp.num_channels} must be 1 or 3')
  if view_counts.enabled(pp):
    multicrop.check(pp)
    if pp.mixup or pp.get('cutmix', 0.0):
      raise ValueError('config.pp.mixup / config.pp.cutmix mix single images; set them to '
                       '0 with config.pp.multicrop views.')
  else:
    preprocess.train_chains(pp)  # op names, arguments and places
  for key in ('mixup', 'cutmix'):
    if not pp.get(key, 0.0) >= 0:
      raise ValueError(f'config.pp.{key}={pp.get(key)!r} must be >= 0 (Beta alpha; 0 = off)')
  if not 0 <= pp.get('cutmix_switch_prob', 0.5) <= 1:
    raise ValueError(f'config.pp.cutmix_switch_prob={pp.cutmix_switch_prob!r} must be in '
                     '[0, 1]')
  repeats, rows = pp.get('repeats', 1), config.batch // max(1, config.data_shards)
  if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
    raise ValueError(f'config.pp.repeats={repeats!r} must be a positive integer')
  # Mixing pairs rows `repeats` apart inside a shard's rows (wrapping around): with fewer
  # than 2 x repeats rows, some image would be mixed with its own copy.
  if repeats > 1 and rows < 2 * repeats and (pp.mixup or pp.get('cutmix', 0.0)):
    raise ValueError(f'config.pp.repeats={repeats} with Mixup/CutMix needs at least '
                     f'{2 * repeats} rows per data shard (config.batch / config.data_shards '
                     f'= {rows}), or an image is mixed with its own copy')
  mb = config.get('cache_decoded_mb', 0)
  if isinstance(mb, bool) or not isinstance(mb, (int, float)) or mb < 0:
    raise ValueError(f'config.cache_decoded_mb={mb!r} must be a number of MB >= 0')
  shards = config.data_shards
  if shards < 1 or config.batch % shards:
    raise ValueError(f'config.batch={config.batch} is not divisible by '
                     f'config.data_shards={shards}')
  if info.num_train < shards:
    raise ValueError(f'{info.name} split {info.train_split!r} has {info.num_train} examples, '
                     f'fewer than config.data_shards={shards}: lower data_shards')


def check_eval_config(config) -> None:
  """One-line errors for evaluation preprocessing settings that cannot work."""
  pp = config.pp
  preprocess.eval_chain(pp)  # op names and arguments; deterministic ops only
  if pp.eval == 'central_crop' and pp.resize < pp.crop:
    raise ValueError(f'config.pp.resize={pp.resize} is smaller than config.pp.crop='
                     f'{pp.crop}: central_crop takes pp.crop out of pp.resize')


def train_dataset(config, shards: list[int], start_step: int = 0):
  """The per-process tf.data training pipeline for the given virtual shards (ascending).

  Yields batches of len(shards) * batch/data_shards rows: {'image': uint8, 'label', 'index'
  (each example's position in the training split), 'ratio' (mixing weights, with pp.mixup
  or pp.cutmix), 'image_ratio' and 'box' (with pp.cutmix)}.
  Batch ops at the end of pp.train run after batching, each shard's rows a block.
  finalize() turns them into model inputs. Exposed so tests and tools can build any
  process's part of the global batch without a multi-process run.
  """
  _hide_accelerators()
  spec, builder, info = _source(config)
  check_train_config(config, info)
  files = reader.split_files(builder, info.train_split)
  num_shards = config.data_shards
  rows = config.batch // num_shards
  bounds = plan.shard_bounds(files.num_examples, num_shards)
  parse = _parser(builder, spec)
  shuffle = config.shuffle_buffer > 1
  segment = max(1, _ceil_div(config.shuffle_buffer, num_shards)) if shuffle else 1024
  repeats = config.pp.get('repeats', 1)
  # Small data whose training chain decodes whole images is kept decoded: the decode op runs
  # once per image, not once per epoch (the same pixels).
  decode = (functools.partial(preprocess.decode_op, pp=config.pp, scale=spec.image_scale)
            if not view_counts.enabled(config.pp) and preprocess.decodes_whole(config.pp)
            else None)
  cached = (reader.cache_shards(files, [bounds[v] for v in shards], parse, decode,
                                int(config.get('cache_decoded_mb', 0) * 2**20)) if config.cache
            else [None] * len(shards))
  streams = []
  for v, shard_cache in zip(shards, cached):
    start = start_step * rows
    s = reader.shard_stream(files, bounds[v], segment, config.seed, v,
                            start=start // repeats, shuffle=shuffle, cached=shard_cache)
    if repeats > 1:
      s = _repeated(s, repeats).skip(start % repeats)  # a step may begin mid-copies
    streams.append(s)
  if len(streams) == 1:
    ds = streams[0]
  else:  # round robin in blocks of `rows`: each batch is shard after shard, ascending
    selector = tf.data.Dataset.from_tensor_slices(
        np.repeat(np.arange(len(shards), dtype=np.int64), rows)).repeat()
    ds = tf.data.Dataset.choose_from_datasets(streams, selector)
  pp = config.pp
  base_seed = tf.constant([config.seed, 0], tf.int64)
  fold_in = tf.random.experimental.stateless_fold_in
  batch_ops = None if view_counts.enabled(pp) else preprocess.train_chains(pp)[1]

  def example(el):
    # Cached datasets come parsed, maybe decoded (reader.cache_shards), the others as records.
    data, label = ((el.get('image', el.get('image_bytes')), el['label'])
                   if 'record' not in el else parse(el['record']))
    seed = fold_in(fold_in(base_seed, 2 * el['shard']), el['position'])
    if view_counts.enabled(pp):  # 'image' [views, ...] and 'local' [local views, ...]
      out = multicrop.views(data, seed, pp, spec.image_scale)
    else:
      out = {'image': preprocess.train_image(data, seed, pp, spec.image_scale,
                                             decoded='image' in el)}
    # Scalar labels become one-hot vectors per batch (targets_of_batch), label lists here.
    out.update(label=(preprocess.targets(label, info.num_classes, True, pp.label_smoothing)
                      if pp.multi_hot else label),
               index=el['index'])
    if batch_ops is not None:
      out['position'] = el['position']
    if pp.mixup > 0 or pp.get('cutmix', 0.0) > 0:
      # One draw per shard and step: every row of a shard's block gets the same one.
      step_seed = fold_in(fold_in(base_seed, 2 * el['shard'] + 1), el['position'] // rows)
      out.update(preprocess.mix_params(step_seed, pp))
    return out

  # Batch ops draw from one seed per data shard and step (a stream apart from the examples'
  # and the mixing draws), so a block's augmentation does not depend on the process count.
  block_base = tf.constant([config.seed, 1], tf.int64)

  def of_batch(batch):
    if not pp.multi_hot:  # one op per batch instead of one per example; the same values
      batch = dict(batch, label=preprocess.targets(batch['label'], info.num_classes,
                                                   smoothing=pp.label_smoothing))
    if batch_ops is not None:
      position = batch.pop('position')
      seeds = tf.stack([fold_in(fold_in(block_base, np.int64(v)), position[j * rows] // rows)
                        for j, v in enumerate(shards)])
      batch['image'] = batch_ops(batch['image'], seeds)
    return batch

  ds = ds.map(reader.traced(example), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  ds = ds.batch(rows * len(shards), drop_remainder=True)
  if not pp.multi_hot or batch_ops is not None:
    ds = ds.map(reader.traced(of_batch), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE).with_options(_options())


def _multi_hot(ids: tf.Tensor, num_classes: int) -> tf.Tensor:
  """float32 [num_classes] with 1 at each id of a (maybe empty) id list; ids < 0 are none."""
  ids = tf.concat([tf.reshape(tf.cast(ids, tf.int64), [-1]), tf.constant([-1], tf.int64)], 0)
  return tf.reduce_max(tf.one_hot(ids, num_classes), axis=0)


def _label_is_list(builder, spec) -> bool:
  """Whether the label feature holds a list of classes per image (ReaL's real_label)."""
  feature = builder.info.features[spec.label_key] if not spec.label_fn else None
  return isinstance(feature, tfds.features.Sequence)


def _eval_pass(config, split: Optional[str], slots: list[int], num_slots: int, *,
               label_key: str = '', real_labels_path: str = ''):
  """The per-process tf.data pass over an eval split for the given slots (ascending).

  `split` defaults to the dataset's evaluation split (config.eval_split). The split is cut
  into num_slots contiguous chunks; each batch holds batch_eval/num_slots
  rows of every listed slot. Returns (dataset, number of batches, whether the labels are
  sets); batches are {'image': uint8, 'label', 'mask', 'index'}; padding rows have mask,
  label and image 0 and index -1.
  Labels come from the feature `label_key` ('' = the dataset's), multi-hot where it holds
  a list of classes, or from the ReaL file `real_labels_path` (vit_jax.data.label_sets);
  an image with an empty label set has an all-zero label row and mask 1.
  """
  _hide_accelerators()
  spec, builder, info = _source(config, label_key, train=False)
  split = split or info.eval_split
  pp = config.pp
  check_eval_config(config)
  if not split:
    raise ValueError(f'{info.name} has no evaluation split: set config.eval_split '
                     '(an image folder needs ROOT/test/CLASS/*.jpg)')
  if config.batch_eval % num_slots:
    raise ValueError(f'config.batch_eval={config.batch_eval} is not divisible by the '
                     f'{num_slots} data-parallel devices')
  files = reader.split_files(builder, split)
  n = files.num_examples
  if n == 0:
    raise ValueError(f'{info.name} split {split!r} is empty')
  rows = config.batch_eval // num_slots
  num_batches = _ceil_div(_ceil_div(n, num_slots), rows)
  # Padding rows decode a real record (kept in memory), then are masked to zero.
  filler = reader.read_range(files, 0, 1).cache()
  streams = []
  for s in slots:
    lo, hi = s * n // num_slots, (s + 1) * n // num_slots
    real = tf.data.Dataset.zip(reader.read_range(files, lo, hi),
                               tf.data.Dataset.range(lo, hi))
    pad = tf.data.Dataset.zip(filler.repeat(num_batches * rows - (hi - lo)),
                              tf.data.Dataset.range(-1, 0).repeat())
    streams.append(real.concatenate(pad))
  selector = tf.data.Dataset.from_tensor_slices(
      np.repeat(np.arange(len(slots), dtype=np.int64), rows)).repeat(num_batches)
  ds = tf.data.Dataset.choose_from_datasets(streams, selector)

  parse = _parser(builder, spec)
  label_rows = (label_sets.rows(builder, split, n, real_labels_path, info.num_classes)
                if real_labels_path else None)
  sets = label_rows is not None or _label_is_list(builder, spec)

  def example(record, index):
    image_bytes, label = parse(record)
    mask = tf.cast(index >= 0, tf.float32)
    image = preprocess.decode(image_bytes, pp.num_channels)
    if spec.image_scale != 1:
      image = image * tf.constant(spec.image_scale, tf.uint8)
    if label_rows is not None:
      label = label_rows(record, index)
    target = (_multi_hot(label, info.num_classes) if sets
              else preprocess.targets(label, info.num_classes, pp.multi_hot))
    return {'image': preprocess.eval_uint8(image, pp) * tf.cast(mask, tf.uint8),
            'label': target * mask, 'mask': mask, 'index': index}

  ds = ds.map(reader.traced(example), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  ds = ds.batch(rows * len(slots), drop_remainder=True)
  return ds.prefetch(tf.data.AUTOTUNE).with_options(_options()), num_batches, sets


def eval_dataset(config, split: Optional[str], slots: list[int], num_slots: int, *,
                 label_key: str = '', real_labels_path: str = ''):
  """(dataset, number of batches) of an eval pass; see _eval_pass."""
  ds, num_batches, _ = _eval_pass(config, split, slots, num_slots, label_key=label_key,
                                  real_labels_path=real_labels_path)
  return ds, num_batches


def value_range(image):
  """Maps uint8 pixels 0..255 to float32 -1..1 (numpy or jax arrays)."""
  # The clip absorbs XLA's multiply-by-reciprocal rounding (255 / 127.5 - 1 = 1 + 1 ulp).
  return (image.astype(np.float32) / 127.5 - 1.0).clip(-1.0, 1.0)


def finalize(batch: dict, group: int, shift: int = 1) -> dict:
  """Turns a pipeline batch into model inputs: float32 images in [-1, 1], Mixup/CutMix applied.

  Mixup pairs each row with the one `shift` rows before it inside consecutive blocks of
  `group` rows (one virtual shard's rows), so it does not depend on how rows are spread over
  processes; with repeated augmentation the shift is the repeat count, so that an image is
  not mixed with its own copy. Runs on the devices, under jit, on global arrays.
  """
  out = {k: v for k, v in batch.items() if k not in ('ratio', 'image_ratio', 'box', 'index')}
  out['image'] = value_range(batch['image'])
  if 'local' in batch:  # multi-crop: the local views
    out['local'] = value_range(batch['local'])
  if 'ratio' in batch:

    def mix(x, weight):
      blocks = x.reshape((-1, group) + x.shape[1:])
      partner = jnp.roll(blocks, shift, axis=1).reshape(x.shape)
      lam = weight.reshape(weight.shape + (1,) * (x.ndim - weight.ndim))
      return lam * x + (1.0 - lam) * partner
    image_weight = batch['ratio']
    if 'box' in batch:
      image_weight = _cutmix_weights(batch['box'], batch['image_ratio'],
                                     out['image'].shape[1:3])
    out['image'] = mix(out['image'], image_weight)
    out['label'] = mix(out['label'], batch['ratio'])
  return out


def _cutmix_weights(box, outside, hw: tuple[int, int]):
  """Per-pixel weights [batch, H, W] of each row's own image: 0 inside its box, else `outside`."""
  rows = jnp.arange(hw[0])[None, :, None]
  cols = jnp.arange(hw[1])[None, None, :]
  top, left, height, width = (box[:, i, None, None] for i in range(4))
  inside = (rows >= top) & (rows < top + height) & (cols >= left) & (cols < left + width)
  return jnp.where(inside, 0.0, outside[:, None, None])


def _finalizer(sharding: jax.sharding.NamedSharding, group: int, shift: int = 1):
  """Returns finalize() jitted for global batches with this sharding."""
  return jax.jit(functools.partial(finalize, group=group, shift=shift),
                 out_shardings=sharding)


def _global_batches(local_batches, to_inputs, sharding, global_batch: int,
                    prefetch: int) -> Iterator[dict]:
  """Turns per-process numpy batches into finalized global jax.Arrays, `prefetch` ahead."""
  queue = collections.deque()
  for batch in local_batches:
    arrays = {k: jax.make_array_from_process_local_data(
        sharding, v, (global_batch,) + v.shape[1:]) for k, v in batch.items()
              if k != 'index'}
    # Transfers and the jitted conversion are asynchronous: queued batches are on their
    # way to the devices while the training step runs.
    queue.append(to_inputs(arrays))
    if len(queue) > prefetch:
      yield queue.popleft()
  while queue:
    yield queue.popleft()


def make_train_iterator(config, mesh: jax.sharding.Mesh, start_step: int = 0) -> Iterator[dict]:
  """Yields the global training batches of steps start_step, start_step+1, ..., forever.

  {'image': float32 [batch, crop, crop, 3] in [-1, 1], 'label': float32 [batch, classes]},
  batch dim sharded over the mesh's data axes; identical for any process count. With
  multi-crop views (vit_jax.data.multicrop) 'image' is [batch, views, crop, crop, 3] and
  'local' [batch, local views, local_crop, local_crop, 3].
  """
  _check_divisible('batch', config.batch, mesh)
  num_shards = config.data_shards
  sharding = sharding_lib.batch_sharding(mesh)
  shards = _groups_of_rows(local_row_runs(sharding, config.batch),
                           config.batch // num_shards, 'data shards')
  ds = train_dataset(config, shards, start_step)
  to_inputs = _finalizer(sharding, config.batch // num_shards, config.pp.get('repeats', 1))
  local = _sized(ds.as_numpy_iterator(), config.pp, config.dataset)
  return _global_batches(local, to_inputs, sharding, config.batch, max(1, config.prefetch))


def _sized(local_batches: Iterator[dict], pp, dataset: str) -> Iterator[dict]:
  """The batches, once the first has shown that the chain makes pp.crop-sized images."""
  first = next(local_batches)
  size = tuple(first['image'].shape[-3:-1])  # [..., H, W, C]; multi-crop: [B, views, ...]
  if size != (pp.crop, pp.crop):
    chain = ('the config.pp.multicrop views' if view_counts.enabled(pp)
             else f'config.pp.train={pp.train!r}')
    raise ValueError(f'{chain} gives {size[0]}x{size[1]} images of {dataset}, but the '
                     f'model takes config.pp.crop={pp.crop}: put a resize({pp.crop}) or '
                     f'crop op in the chain, or set --config.pp.crop to match.')
  yield first
  yield from local_batches


class EvalIterable:
  """Each iter() is one complete pass over the eval split as global, masked batches.

  `label_sets`: the labels are sets of classes (ReaL), some maybe empty.
  """

  def __init__(self, dataset, num_batches: int, sharding, batch: int, prefetch: int,
               label_sets: bool = False):
    self.label_sets = label_sets
    self._dataset = dataset
    self._num_batches = num_batches
    self._sharding = sharding
    self._batch = batch
    self._prefetch = prefetch
    self._to_inputs = _finalizer(sharding, batch)  # Compiled once, used by every pass.

  def __len__(self) -> int:
    return self._num_batches

  def __iter__(self) -> Iterator[dict]:
    return _global_batches(self._dataset.as_numpy_iterator(), self._to_inputs,
                           self._sharding, self._batch, self._prefetch)


def make_eval_iterator(config, mesh: jax.sharding.Mesh, split: Optional[str] = None, *,
                       label_key: str = '', real_labels_path: str = '') -> EvalIterable:
  """An eval split (default: config.eval_split) as global batches of 'image', 'label', 'mask'.

  label_key / real_labels_path: where the labels come from, as in eval_dataset.
  """
  _check_divisible('batch_eval', config.batch_eval, mesh)
  sharding = sharding_lib.batch_sharding(mesh)
  num_slots = mesh.size
  slots = _groups_of_rows(local_row_runs(sharding, config.batch_eval),
                          config.batch_eval // num_slots, 'device blocks')
  ds, num_batches, sets = _eval_pass(config, split, slots, num_slots, label_key=label_key,
                                     real_labels_path=real_labels_path)
  return EvalIterable(ds, num_batches, sharding, config.batch_eval, max(1, config.prefetch),
                      sets)


def preprocess_for_eval_numpy(image: np.ndarray, config) -> np.ndarray:
  """Applies the eval preprocessing to one uint8 image [H, W] or [H, W, C]: float32 [-1, 1]."""
  _hide_accelerators()
  image = np.asarray(image)
  if image.dtype != np.uint8:
    raise ValueError(f'Expected a uint8 image, got dtype {image.dtype}')
  if image.ndim == 2:
    image = image[..., None]
  if image.ndim != 3 or image.shape[-1] not in (1, 3, 4):
    raise ValueError(f'Expected an image [H, W] or [H, W, 1|3|4], got shape {image.shape}')
  image = image[..., :3]
  channels = config.pp.num_channels
  if image.shape[-1] != channels:
    image = (np.repeat(image, 3, axis=-1) if channels == 3
             else tf.image.rgb_to_grayscale(image).numpy())
  return value_range(preprocess.eval_uint8(tf.constant(image), config.pp).numpy())
