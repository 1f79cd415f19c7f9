"""Reads a TFDS split's serialized examples by position, straight from its TFRecord files.

A split expression ('train[:800]+validation[:200]') resolves through TFDS to file
instructions (file, skip, take); their concatenation numbers the split's examples 0..N-1 in
a fixed order. Any range of those positions maps back to (file, skip, take) pieces, which
tf.data reads with TFRecordDataset(file).skip(skip).take(take): reading a range costs at most
one partial file beyond the range itself, and nothing is decoded.
"""
import dataclasses
import os
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from vit_jax.data import plan


@dataclasses.dataclass(frozen=True)
class SplitFiles:
  """The TFRecord pieces (file, records skipped, records taken) of a split, in order."""
  paths: tuple[str, ...]
  skips: tuple[int, ...]
  takes: tuple[int, ...]

  @property
  def num_examples(self) -> int:
    """The number of examples of the split."""
    return sum(self.takes)

  def pieces(self, start: int, end: int) -> tuple[list[str], list[int], list[int]]:
    """Returns (paths, skips, takes) reading split positions [start, end) in order."""
    paths, skips, takes = [], [], []
    offset = 0
    for path, skip, take in zip(self.paths, self.skips, self.takes):
      lo, hi = max(start, offset), min(end, offset + take)
      if lo < hi:
        paths.append(path)
        skips.append(skip + lo - offset)
        takes.append(hi - lo)
      offset += take
    return paths, skips, takes


def traced(fn: Callable) -> Callable:
  """`fn` for Dataset.map, traced as written instead of rewritten by autograph.

  Our map functions use tf.cond / tf.where, never Python control flow on tensors,
  and autograph's conversion costs seconds of start-up in every run.
  """
  return tf.autograph.experimental.do_not_convert(fn)


def split_files(builder, split: str) -> SplitFiles:
  """Resolves a split expression of a prepared TFDS builder to its TFRecord pieces."""
  file_format = str(getattr(builder.info, 'file_format', 'tfrecord') or 'tfrecord')
  if 'tfrecord' not in file_format.lower():
    raise ValueError(
        f'{builder.name} is prepared as {file_format}; vit_jax reads TFRecord files: '
        f'prepare it again with `tfds build {builder.name} --file_format=tfrecord`')
  try:
    instructions = builder.info.splits[split].file_instructions
  except (KeyError, ValueError, AssertionError) as e:
    raise ValueError(f'Bad split {split!r} for {builder.name}: {e}; available splits: '
                     f'{", ".join(builder.info.splits.keys())}') from None
  return SplitFiles(
      paths=tuple(os.fspath(i.filename) for i in instructions),
      skips=tuple(int(i.skip) for i in instructions),
      takes=tuple(int(i.take) for i in instructions))


def read_pieces(paths, skips, takes) -> tf.data.Dataset:
  """Returns the serialized records of (path, skip, take) pieces (tensors), concatenated."""
  pieces = tf.data.Dataset.from_tensor_slices((paths, skips, takes))
  return pieces.flat_map(traced(lambda p, s, t: tf.data.TFRecordDataset(p).skip(s).take(t)))


def read_range(files: SplitFiles, start: int, end: int) -> tf.data.Dataset:
  """Returns the serialized records of split positions [start, end), in order."""
  paths, skips, takes = files.pieces(start, end)
  return read_pieces(tf.constant(paths, tf.string, shape=[len(paths)]),
                     tf.constant(skips, tf.int64, shape=[len(skips)]),
                     tf.constant(takes, tf.int64, shape=[len(takes)]))


def load_records(files: SplitFiles, start: int, end: int) -> np.ndarray:
  """Reads split positions [start, end) into host memory: an object array of bytes."""
  # dtype=object keeps each record's bytes intact; numpy's fixed-width bytes type would
  # strip trailing zero bytes of serialized examples. Read in blocks: one eager step per
  # record cost ~0.5 ms, seconds for a small split.
  out = np.zeros([end - start], object)
  i = 0
  for block in read_range(files, start, end).batch(4096).as_numpy_iterator():
    out[i:i + len(block)] = list(block)
    i += len(block)
  return out


def parse_all(records: np.ndarray, parse: Callable) -> Optional[tuple[np.ndarray, np.ndarray]]:
  """(image bytes, labels) of every record, parsed once; None unless every label is a scalar.

  `parse` maps a serialized record to (encoded image bytes, label).
  """
  ds = tf.data.Dataset.from_tensor_slices(tf.constant(records, tf.string)).map(
      traced(parse), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if ds.element_spec[1].shape.rank != 0:  # label lists (multi-hot datasets)
    return None
  images, labels = [np.zeros([0], object)], [np.zeros([0], np.int64)]
  for image, label in ds.batch(4096).as_numpy_iterator():
    images.append(image.astype(object))
    labels.append(label.astype(np.int64))
  return np.concatenate(images), np.concatenate(labels)


def decode_all(images: np.ndarray, decode: Callable, max_bytes: int) -> Optional[np.ndarray]:
  """The encoded images decoded once, uint8 [n, H, W, C]; None if shapes differ or too big."""
  if not len(images):
    return None
  ds = tf.data.Dataset.from_tensor_slices(tf.constant(images, tf.string)).map(
      traced(decode), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  decoded = []
  for image in ds.as_numpy_iterator():  # the first image sizes the whole; stops at a mismatch
    if not decoded and len(images) * image.nbytes > max_bytes:
      return None
    if decoded and image.shape != decoded[0].shape:
      return None
    decoded.append(image)
  return np.stack(decoded)


def _contiguous_runs(bounds: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
  """Splits [lo, hi) ranges, in order, into runs where each range starts at the last's end."""
  runs = []
  for b in bounds:
    if runs and runs[-1][-1][1] == b[0]:
      runs[-1].append(b)
    else:
      runs.append([b])
  return runs


def cache_shards(files: SplitFiles, bounds: Sequence[tuple[int, int]],
                 parse: Optional[Callable] = None, decode: Optional[Callable] = None,
                 max_decoded_bytes: int = 0) -> list[tuple[np.ndarray, ...]]:
  """Each shard's examples in host memory, for shard_stream(cached=...).

  (records,) per shard, or with `parse` (record -> (image bytes, scalar label)) (image
  bytes, labels) parsed once for all shards together (one traced parser, not one per shard),
  and with `decode` (image bytes -> uint8 image) (images [n, H, W, C], labels) when every
  image decodes to one shape and all take at most max_decoded_bytes.
  """
  records = []
  for run in _contiguous_runs(bounds):  # one read per run of adjacent shards
    block = load_records(files, run[0][0], run[-1][1])
    records += np.split(block, np.cumsum([hi - lo for lo, hi in run])[:-1])
  parsed = parse_all(np.concatenate(records), parse) if parse is not None and records else None
  if parsed is None:
    return [(r,) for r in records]
  images = parsed[0]
  if decode is not None:
    decoded = decode_all(images, decode, max_decoded_bytes)
    images = images if decoded is None else decoded
  ends = np.cumsum([len(r) for r in records])
  return list(zip(np.split(images, ends[:-1]), np.split(parsed[1], ends[:-1])))


def shard_stream(files: SplitFiles, bounds: tuple[int, int], segment_size: int, seed: int,
                 shard: int, start: int = 0, shuffle: bool = True,
                 cached: Optional[tuple[np.ndarray, ...]] = None) -> tf.data.Dataset:
  """The endless stream of one virtual shard from stream position `start`.

  Elements are {'record': serialized example, 'position': stream position, 'index': position
  of the example in the split, 'shard': `shard`}. The reading order is vit_jax.data.plan's;
  with `cached` (this shard's entry of cache_shards) the examples come from host memory
  instead of from disk for every segment, and when they were parsed there, elements carry
  'image_bytes' (or, decoded there, 'image') and 'label' instead of 'record'.
  """
  lo, hi = bounds
  n = hi - lo
  parsed = cached is not None and len(cached) == 2  # (image bytes, labels), else (records,)
  decoded = parsed and cached[0].dtype == np.uint8  # (images [n, H, W, C], labels)
  first, skip = plan.locate(n, segment_size, seed, shard, start, shuffle)

  def segment(q):
    """Segment q as (position, split indices, pieces to read or records, order)."""
    seg = plan.segment(n, segment_size, seed, shard, int(q), shuffle)
    if q == first:
      seg = seg.skip(skip)
    offsets = seg.offsets()
    no_pieces = np.zeros([0], np.int64)
    if cached is not None:
      labels = cached[1][offsets] if parsed else no_pieces
      return (np.int64(seg.position), lo + offsets, cached[0][offsets], labels,
              np.zeros([0], object), no_pieces, no_pieces, no_pieces)
    pieces = [files.pieces(lo + a, lo + b) for a, b in seg.ranges]
    return (np.int64(seg.position), lo + offsets, np.zeros([0], object), no_pieces,
            np.array([p.encode() for r in pieces for p in r[0]], object),
            np.array([s for r in pieces for s in r[1]], np.int64),
            np.array([t for r in pieces for t in r[2]], np.int64),
            seg.order.astype(np.int64))

  def load(q):
    position, index, examples, labels, paths, skips, takes, order = tf.numpy_function(
        segment, [q], [tf.int64, tf.int64, tf.uint8 if decoded else tf.string, tf.int64,
                       tf.string, tf.int64, tf.int64, tf.int64])
    index = tf.reshape(index, [-1])
    count = tf.shape(index, out_type=tf.int64)[0]
    out = {'index': index, 'shard': tf.fill([count], tf.constant(shard, tf.int64)),
           'position': tf.reshape(position, []) + tf.range(count, dtype=tf.int64)}
    if decoded:
      out.update(image=tf.reshape(examples, (-1,) + cached[0].shape[1:]),
                 label=tf.reshape(labels, [-1]))
    elif parsed:
      out.update(image_bytes=tf.reshape(examples, [-1]), label=tf.reshape(labels, [-1]))
    elif cached is not None:
      out['record'] = tf.reshape(examples, [-1])
    else:
      read = read_pieces(tf.reshape(paths, [-1]), tf.reshape(skips, [-1]),
                         tf.reshape(takes, [-1]))
      # A segment is loaded whole: its in-memory shuffle needs every record.
      out['record'] = tf.gather(read.batch(segment_size + 1).get_single_element(), order)
    return out

  # Loading the next segment overlaps with emitting the current one.
  return tf.data.Dataset.counter(first).map(traced(load)).prefetch(1).unbatch()
