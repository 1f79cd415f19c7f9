r"""Frozen features of a dataset split: the one extraction path of the probing evaluators.

Few-shot, k-NN, the linear probe and the layer analyses all read a labelled dataset
in file order with the run's evaluation preprocessing (`open_dataset`,
`image_batches`) and turn its batches into features with one `FeatureExtractor`:
  features(params, batches)        pre-logits features [N, D] (the model without its
                                   head: the pre-logits layer when it has one, else
                                   the pooled, normalised token)
  layer_features(params, batches)  every block's output pooled to [layers, N, D]
                                   (the class token, or the mean of the patch tokens)
  layer_tokens(params, images)     every block's patch tokens [layers, N, P, D]
  last_blocks_fn(n, avgpool)       a jitted (params, images) -> [N, (n + avgpool) * D]:
                                   the class tokens of the last n blocks through the
                                   final norm (+ the mean of the last one's patch tokens),
                                   DINO's get_intermediate_layers features; on device,
                                   sharded over the batch (the streaming linear probes)
Each is jitted once: batches are padded to the fixed batch size, and the padding's
rows are dropped again, so no example is lost or counted twice. Datasets are read on
every process (probing sets are small), each device takes its slice of the batch.

Datasets are named as in the few-shot evaluator: 'mnist5k', or
'name|train_split|test_split' (e.g. 'imagenet2012|train[:50000]|validation').
"""
from collections.abc import Iterable, Iterator, Mapping
import dataclasses
import re
from typing import Any, Callable, Optional

from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import ml_collections
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from vit_jax import models
from vit_jax.data import preprocess
from vit_jax.data import reader
from vit_jax.data import sources
from vit_jax.evaluators import base

Batches = Iterable[tuple[np.ndarray, np.ndarray]]
POOLINGS = ('auto', 'token', 'patches')
_BLOCK = re.compile(r'encoderblock_\d+')


# ----------------------------------------------------------------------------
# Datasets: the trainer's datasets with the evaluation preprocessing.


@dataclasses.dataclass
class Dataset:
  """One probing dataset: its builder, splits and the labels of its training split."""
  name: str
  spec: sources.DatasetSpec
  builder: Any
  train_split: str
  test_split: str
  num_classes: int
  train_labels: np.ndarray


def parse_dataset(entry: str) -> tuple[str, Optional[str], Optional[str]]:
  """'name' or 'name|train_split|test_split' -> (name, train_split, test_split)."""
  parts = entry.split('|')
  if len(parts) not in (1, 3) or not all(parts):
    raise ValueError(f'Dataset entry {entry!r}: use a dataset name '
                     "('mnist5k') or 'name|train_split|test_split' "
                     "('imagenet2012|train[:50000]|validation').")
  return (parts[0], None, None) if len(parts) == 1 else tuple(parts)


def dataset_key(entry: str) -> str:
  """The dataset's name as a metric key part: TFDS config slashes flattened."""
  return parse_dataset(entry)[0].replace('/', '_').replace(':', '_')


def check_datasets(name: str, datasets: Any, data_dir: Optional[str]) -> None:
  """One-line errors for `config.evals.<name>.datasets` before anything is read or made."""
  if isinstance(datasets, str) or not datasets or not all(
      isinstance(d, str) and d for d in datasets):
    raise ValueError(f'config.evals.{name}.datasets={datasets!r}: use a list of '
                     "dataset names, e.g. ('mnist5k',).")
  for entry in datasets:
    try:
      dataset, train_split, test_split = parse_dataset(entry)
      spec = sources.resolve(dataset)
    except ValueError as e:
      raise ValueError(f'config.evals.{name}.datasets: {e}') from None
    for split in (train_split or spec.train_split, test_split or spec.eval_split):
      sources.check_split(spec, data_dir, split,
                          f'config.evals.{name}.datasets {entry!r}: split')


def check_batch(config: ml_collections.ConfigDict, mesh: Optional[Any] = None) -> int:
  """config.batch_eval, or a one-line error if it is not a positive multiple of the devices."""
  batch = config.batch_eval
  devices = mesh.devices.size if mesh is not None else 1
  if not isinstance(batch, int) or batch < 1 or batch % devices:
    raise ValueError(f'config.batch_eval={batch} must be a positive multiple of the '
                     f'{devices} devices of the mesh.')
  return batch


def _labels_fn(spec: sources.DatasetSpec) -> Callable:
  if spec.label_fn:
    return preprocess.LABEL_FNS[spec.label_fn]
  return lambda ex: ex[spec.label_key]


def _as_dataset(data: Dataset, split: str) -> tf.data.Dataset:
  """The split in file order with undecoded images (decoded only when needed)."""
  return data.builder.as_dataset(
      split=split, shuffle_files=False,
      decoders={data.spec.image_key: tfds.decode.SkipDecoding()})


def split_labels(data: Dataset, split: str) -> np.ndarray:
  """The labels [N] of a split, in file order, without decoding its images."""
  ds = _as_dataset(data, split).map(reader.traced(_labels_fn(data.spec)),
                                    num_parallel_calls=tf.data.AUTOTUNE)
  batches = list(ds.batch(4096).prefetch(2).as_numpy_iterator())
  return np.concatenate([np.zeros(0, np.int64)] + batches).astype(np.int64)


def open_dataset(entry: str, data_dir: Optional[str],
                 manual_dir: Optional[str] = None) -> Dataset:
  """Prepares (if needed) one dataset and reads the labels of its training split."""
  name, train_split, test_split = parse_dataset(entry)
  spec = sources.resolve(name)
  builder = sources.prepare(spec, data_dir, manual_dir)
  train_split = train_split or spec.train_split
  test_split = test_split or spec.eval_split
  for split in (train_split, test_split):
    sources.split_size(builder, split)  # one-line error for a bad split
  features = builder.info.features
  feature = (features[spec.label_key]
             if not spec.label_fn and spec.label_key in features else None)
  num_classes = int(getattr(feature, 'num_classes', 0) or spec.num_classes)
  if num_classes <= 0:
    raise ValueError(f'Dataset {name!r}: feature {spec.label_key!r} is not a class '
                     'label.')
  data = Dataset(name, spec, builder, train_split, test_split, num_classes,
                 np.zeros(0, np.int64))
  data.train_labels = split_labels(data, train_split)
  return data


def image_batches(data: Dataset, split: str, rows: Optional[np.ndarray],
                  pp: ml_collections.ConfigDict, batch_size: int) -> Batches:
  """Yields (float32 images [B, crop, crop, 3] in [-1, 1], labels [B]) in file order.

  With `rows` (positions in the training split), only those examples are decoded.
  """
  ds = _as_dataset(data, split)
  if rows is not None:
    wanted = np.zeros(len(data.train_labels), bool)
    wanted[rows] = True
    wanted = tf.constant(wanted)
    ds = ds.enumerate().filter(reader.traced(lambda i, ex: tf.gather(wanted, i))).map(
        reader.traced(lambda i, ex: ex))
  label_fn = _labels_fn(data.spec)

  def prepare(ex):
    return _eval_image(data, ex, pp), label_fn(ex)

  ds = ds.map(reader.traced(prepare), num_parallel_calls=tf.data.AUTOTUNE)
  yield from ds.batch(batch_size).prefetch(2).as_numpy_iterator()


def _eval_image(data: Dataset, ex: dict, pp: ml_collections.ConfigDict) -> tf.Tensor:
  """An example's image through the evaluation preprocessing: float32 in [-1, 1]."""
  image = preprocess.decode(ex[data.spec.image_key], pp.num_channels)
  if data.spec.image_scale != 1:
    image = image * tf.constant(data.spec.image_scale, image.dtype)
  return preprocess.eval_image(image, pp)


def augmented_batches(data: Dataset, split: str, pp: ml_collections.ConfigDict,
                      batch_size: int, seed: int, shuffle_buffer: int,
                      train: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray,
                                                            np.ndarray]]:
  """Yields (float32 images in [-1, 1], labels, rows in the split) [B] without end.

  The split repeats and is shuffled (a `shuffle_buffer` window, drawn with `seed`);
  with `train` each example goes through the random ops of pp.train seeded by
  (seed, its position in the stream), else through pp.eval. Every batch is full.
  """
  ds = _as_dataset(data, split).enumerate().repeat()
  if shuffle_buffer > 1:
    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  label_fn = _labels_fn(data.spec)
  scale = data.spec.image_scale

  def prepare(position, row_ex):
    row, ex = row_ex
    if train:
      image = preprocess.train_image(ex[data.spec.image_key],
                                     tf.stack([tf.constant(seed, tf.int64), position]),
                                     pp, scale)
      image = tf.cast(image, tf.float32) / 127.5 - 1.0
    else:
      image = _eval_image(data, ex, pp)
    return image, label_fn(ex), row

  ds = ds.enumerate().map(reader.traced(prepare), num_parallel_calls=tf.data.AUTOTUNE)
  yield from ds.batch(batch_size, drop_remainder=True).prefetch(2).as_numpy_iterator()


def eval_pp(config: ml_collections.ConfigDict,
            resolution: int) -> ml_collections.ConfigDict:
  """config.pp's eval recipe at `resolution` (resize scaled to keep the crop ratio)."""
  pp = ml_collections.ConfigDict(config.pp.to_dict())
  if resolution and resolution != pp.crop:
    pp.resize = max(resolution, round(pp.resize * resolution / pp.crop))
    pp.crop = resolution
  return pp


def check_resolution(name: str, options: ml_collections.ConfigDict) -> int:
  """config.evals.<name>.resolution (0: the training crop), or a one-line error."""
  resolution = options.get('resolution', 0)
  if not isinstance(resolution, int) or resolution < 0:
    raise ValueError(f'config.evals.{name}.resolution={resolution!r}: use 0 (the '
                     'training crop) or a positive size in pixels.')
  return resolution


# ----------------------------------------------------------------------------
# Features.


def check_labelled(x: np.ndarray, labels: np.ndarray, num_classes: int,
                   what: str) -> None:
  """One-line error unless `x` is [N, D] features of N > 0 labels in [0, num_classes)."""
  if x.ndim != 2 or len(x) != len(labels) or not len(x):
    raise ValueError(f'{what}: need features [N, D] and N labels with N > 0, '
                     f'got {x.shape} and {labels.shape}.')
  if labels.min() < 0 or labels.max() >= num_classes:
    raise ValueError(f'{what}: labels must lie in [0, {num_classes}), got '
                     f'{labels.min()}..{labels.max()}.')


def prefix_tokens(model: nn.Module) -> int:
  """Tokens before the patch tokens (class, distillation and register tokens)."""
  return int(models.family_of(model).prefix_tokens(model))


def has_class_token(model: nn.Module) -> bool:
  """Whether the model's first token is a class token."""
  return bool(models.family_of(model).class_token(model))


def pool_tokens(tokens: np.ndarray, prefix: int, pooling: str,
                class_token: Optional[bool] = None) -> np.ndarray:
  """[..., T, D] tokens -> [..., D]: the class token, or the mean of the patch tokens."""
  if pooling not in POOLINGS:
    raise ValueError(f'pooling={pooling!r}: use one of {", ".join(POOLINGS)}.')
  # Without a flag the first prefix token is taken for the class token.
  cls = bool(prefix) if class_token is None else class_token
  if pooling == 'token' and not cls:
    raise ValueError("pooling='token' needs a model with a class token; use "
                     "'patches' (the mean of the patch tokens).")
  if pooling == 'token' or (pooling == 'auto' and cls):
    return tokens[..., 0, :]
  return tokens[..., prefix:, :].mean(axis=-2)


class FeatureExtractor:
  """Jitted feature functions of one model on a mesh, with a fixed batch size."""

  def __init__(self, model: nn.Module, mesh: jax.sharding.Mesh, batch_size: int):
    if batch_size < 1 or batch_size % mesh.devices.size:
      raise ValueError(f'Batch size {batch_size} must be a positive multiple of the '
                       f'{mesh.devices.size} devices of the mesh.')
    self.model = model
    self.batch_size = batch_size
    family = models.family_of(model)
    self.prefix = prefix_tokens(model)
    self.class_token = has_class_token(model)
    self._heads = set(family.fresh_keys)
    self._batch_sharding = NamedSharding(mesh, P(mesh.axis_names))
    replicated = NamedSharding(mesh, P())
    # Without its head the model returns its features (pre-logits or pooled tokens).
    feature_model = model.clone(num_classes=0)
    self._features_fn = jax.jit(
        lambda params, images: feature_model.apply(
            {'params': params}, images, train=False),
        out_shardings=replicated)
    self._layers_fn = None
    if family.attention_fields is not None:
      # Blocks called one by one (no scan, no remat), so each one's output is captured.
      plain = feature_model.clone(**family.attention_fields)
      self._layers_fn = jax.jit(
          lambda params, images: _block_outputs(plain, params, images),
          out_shardings=replicated)

  def _params(self, params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in self._heads}

  def _padded(self, images: np.ndarray, size: Optional[int] = None) -> jax.Array:
    """The batch padded to `size` (default: the fixed size), each device holding its slice."""
    n, size = len(images), size or self.batch_size
    if n > size:
      raise ValueError(f'A batch of {n} images exceeds the batch size {size}.')
    if n < size:
      pad = np.zeros((size - n,) + images.shape[1:], images.dtype)
      images = np.concatenate([images, pad])
    # Every process holds the same full batch; each device takes its slice.
    return jax.make_array_from_callback(
        images.shape, self._batch_sharding, lambda idx, im=images: im[idx])

  def shard(self, rows: np.ndarray, size: int) -> jax.Array:
    """Rows [n, ...] zero-padded to `size` (a multiple of the devices), sharded over the batch."""
    if size % self._batch_sharding.mesh.devices.size:
      raise ValueError(f'Batch size {size} must be a multiple of the '
                       f'{self._batch_sharding.mesh.devices.size} devices of the mesh.')
    return self._padded(np.asarray(rows), size)

  def depth(self) -> int:
    """The number of transformer blocks (0 for a model without them)."""
    transformer = getattr(self.model, 'transformer', None)
    if self._layers_fn is None or not transformer:
      return 0
    return int(dict(transformer)['num_layers'])

  def last_blocks_fn(self, n_last_blocks: int, avgpool: bool
                     ) -> Callable[[Mapping[str, Any], jax.Array], jax.Array]:
    """A jitted (params, sharded images) -> features [B, (n + avgpool) * D], batch-sharded.

    The class tokens of the last `n_last_blocks` blocks, each block's output through the
    final norm (DINO's get_intermediate_layers), concatenated oldest first; with
    `avgpool` the mean of the last block's normalised patch tokens follows (DINO
    interleaves the last two vectors; a linear head is indifferent to the order).
    A model that normalises after pooling (fc_norm) has each pooled vector normalised.
    """
    depth = self.depth()
    if not depth:
      raise ValueError(f'{type(self.model).__name__} has no transformer blocks whose '
                       'tokens could be read; use a ViT.')
    if not 1 <= n_last_blocks <= depth:
      raise ValueError(f'n_last_blocks={n_last_blocks}: the model has {depth} blocks; '
                       f'use 1..{depth}.')
    if not self.class_token:
      raise ValueError(f'n_last_blocks={n_last_blocks} reads class tokens but the '
                       f'{type(self.model).__name__} has none (a GAP model); use a '
                       'model with a class token.')
    plain = self.model.clone(num_classes=0, **models.family_of(self.model).attention_fields)
    epsilon = getattr(self.model, 'layer_norm_epsilon', 1e-6)
    prefix, heads = self.prefix, self._heads

    def fn(params, images):
      params = {k: v for k, v in params.items() if k not in heads}
      tokens = _block_outputs(plain, params, images)[-n_last_blocks:]
      norm = nn.LayerNorm(epsilon=epsilon)
      encoder_norm = params.get('Transformer', {}).get('encoder_norm')
      if encoder_norm is not None:
        tokens = norm.apply({'params': encoder_norm}, tokens)
      pooled = [t[:, 0] for t in tokens]
      if avgpool:
        pooled.append(tokens[-1][:, prefix:].mean(axis=1))
      if encoder_norm is None and 'fc_norm' in params:
        pooled = [norm.apply({'params': params['fc_norm']}, p) for p in pooled]
      return jax.lax.stop_gradient(jnp.concatenate(pooled, axis=-1).astype(jnp.float32))

    return jax.jit(fn, out_shardings=self._batch_sharding)

  def features(self, params: Mapping[str, Any],
               batches: Batches) -> tuple[np.ndarray, np.ndarray]:
    """Pre-logits features [N, D] and labels [N] of (images, labels) batches."""
    params = self._params(params)
    feats, labels = [], []
    for images, batch_labels in batches:
      n = len(images)
      out = np.asarray(self._features_fn(params, self._padded(images)), np.float32)[:n]
      # Unpooled classifiers return every token: average the patch tokens into one vector.
      if out.ndim == 3:
        out = out[:, self.prefix:]
      feats.append(out.reshape(n, -1, out.shape[-1]).mean(axis=1))
      labels.append(batch_labels)
    if not feats:
      return np.zeros((0, 0), np.float32), np.zeros((0,), np.int64)
    return np.concatenate(feats), np.concatenate(labels).astype(np.int64)

  def layer_tokens(self, params: Mapping[str, Any], images: np.ndarray) -> np.ndarray:
    """Every block's output tokens float32 [layers, N, T, D] (prefix tokens included)."""
    if self._layers_fn is None:
      raise ValueError(f'{type(self.model).__name__} has no transformer blocks whose '
                       'tokens could be read; use a ViT.')
    params = self._params(params)
    out = []
    for start in range(0, len(images), self.batch_size):
      chunk = np.asarray(images[start:start + self.batch_size], np.float32)
      tokens = self._layers_fn(params, self._padded(chunk))
      out.append(np.asarray(tokens, np.float32)[:, :len(chunk)])
    return np.concatenate(out, axis=1)

  def layer_features(self, params: Mapping[str, Any], batches: Batches,
                     pooling: str = 'auto') -> tuple[np.ndarray, np.ndarray]:
    """Every block's output pooled to [layers, N, D] (see pool_tokens), and labels [N]."""
    feats, labels = [], []
    for images, batch_labels in batches:
      feats.append(pool_tokens(self.layer_tokens(params, images), self.prefix, pooling,
                               self.class_token))
      labels.append(batch_labels)
    if not feats:
      raise ValueError('layer_features: the split has no examples.')
    return np.concatenate(feats, axis=1), np.concatenate(labels).astype(np.int64)


def _block_outputs(model: nn.Module, params: Mapping[str, Any],
                   images: jax.Array) -> jax.Array:
  """Outputs [layers, N, T, D] of the transformer blocks, in depth order."""
  _, state = model.apply(
      {'params': params}, images, train=False, mutable=['intermediates'],
      capture_intermediates=lambda mdl, method: (
          method == '__call__' and bool(_BLOCK.fullmatch(mdl.name or ''))))
  flat = traverse_util.flatten_dict(state['intermediates'])
  outputs = {k[-2]: v[0] for k, v in flat.items()
             if k[-1] == '__call__' and _BLOCK.fullmatch(k[-2])}
  order = sorted(outputs, key=lambda name: int(name.rpartition('_')[2]))
  return jnp.stack([outputs[name] for name in order]).astype(jnp.float32)


# ----------------------------------------------------------------------------
# The base of the whole-split probes (k-NN, linear probe).


class FeatureProbe(base.Evaluator):
  """Shared part of the whole-split probes: datasets opened once, features of both splits."""

  OPTIONS = ('datasets', 'resolution')

  def __init__(self, name: str, options: ml_collections.ConfigDict,
               context: base.Context):
    super().__init__(name, options, context)
    config = context.config
    self.check(name, options, config)
    self.datasets = list(options.datasets)
    self.pp = eval_pp(config, options.get('resolution', 0))
    self.data_dir = config.get('data_dir')
    self.manual_dir = config.get('manual_dir')
    self.batch_size = check_batch(config, context.mesh)
    self.extractor = FeatureExtractor(context.model, context.mesh, self.batch_size)
    self._data: dict[str, Dataset] = {}

  def dataset(self, entry: str) -> Dataset:
    """One of the datasets, opened on first use."""
    if entry not in self._data:
      self._data[entry] = open_dataset(entry, self.data_dir, self.manual_dir)
    return self._data[entry]

  def split_features(self, params: Mapping[str, Any], entry: str
                     ) -> tuple[Dataset, tuple, tuple]:
    """(dataset, (train features, labels), (test features, labels)) of one dataset."""
    data = self.dataset(entry)
    train = self.extractor.features(params, image_batches(
        data, data.train_split, None, self.pp, self.batch_size))
    test = self.extractor.features(params, image_batches(
        data, data.test_split, None, self.pp, self.batch_size))
    return data, train, test
