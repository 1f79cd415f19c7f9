"""The order in which a virtual shard's examples are read: a pure function of (seed, shard, epoch).

A training split of N examples is cut into V contiguous virtual shards (shard v holds the
examples [floor(v*N/V), floor((v+1)*N/V)) of the split). Each shard yields an endless stream,
epoch after epoch; stream position p is example number p % n of epoch p // n (n = shard size).

One epoch of a shard is read in K = ceil(n / segment_size) segments: the shard is rotated by
a random offset, cut into K near-equal segments, the segments are visited in random order and
each is fully shuffled in memory. Segment q of the stream is segment q % K of epoch q // K, so
any segment, and any stream position, is found without replaying the stream: resuming reads
one segment (at most segment_size records) and skips nothing else. All randomness comes from
numpy Generators seeded with (seed, shard, epoch[, segment]); no state carries over.
"""
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Segment:
  """Examples read together: `ranges` of shard offsets, emitted in `order` from `position`."""
  ranges: tuple[tuple[int, int], ...]  # [start, end) shard offsets, concatenated in this order
  order: np.ndarray                    # indices into that concatenation, in emission order
  position: int                        # stream position of the first emitted example

  def offsets(self) -> np.ndarray:
    """Shard offsets of the emitted examples, in emission order."""
    flat = np.concatenate([np.arange(a, b) for a, b in self.ranges])
    return flat[self.order]

  def skip(self, count: int) -> 'Segment':
    """The same segment without its first `count` emitted examples."""
    return Segment(self.ranges, self.order[count:], self.position + count)


def shard_bounds(num_examples: int, num_shards: int) -> list[tuple[int, int]]:
  """Returns the [start, end) example range of every virtual shard of a split."""
  if num_examples < num_shards:
    raise ValueError(f'The training split has {num_examples} examples, fewer than '
                     f'config.data_shards={num_shards}: lower data_shards')
  cuts = [v * num_examples // num_shards for v in range(num_shards + 1)]
  return list(zip(cuts[:-1], cuts[1:]))


def num_segments(n: int, segment_size: int) -> int:
  """Returns K, the number of segments per epoch of a shard of n examples."""
  return -(-n // max(1, segment_size))


def _rng(*key: int) -> np.random.Generator:
  # SeedSequence entropy must be non-negative; masking keeps negative seeds distinct.
  return np.random.default_rng([k & 0xFFFFFFFFFFFFFFFF for k in key])


def _epoch_layout(n: int, k: int, seed: int, shard: int, epoch: int, shuffle: bool):
  """Returns (cuts, rotation, visiting order of the segments) of one epoch."""
  cuts = [j * n // k for j in range(k + 1)]
  if not shuffle:
    return cuts, 0, np.arange(k)
  rng = _rng(seed, shard, epoch)
  return cuts, int(rng.integers(n)), rng.permutation(k)


def segment(n: int, segment_size: int, seed: int, shard: int, q: int,
            shuffle: bool = True) -> Segment:
  """Returns segment q (counted from the stream's start) of a shard of n examples."""
  k = num_segments(n, segment_size)
  epoch, visit_index = divmod(q, k)
  cuts, rotation, visit = _epoch_layout(n, k, seed, shard, epoch, shuffle)
  j = int(visit[visit_index])
  lengths = np.diff(cuts)
  position = epoch * n + int(lengths[visit[:visit_index]].sum())
  start, end = cuts[j] + rotation, cuts[j + 1] + rotation
  if end <= n:
    ranges = ((start, end),)
  elif start >= n:
    ranges = ((start - n, end - n),)
  else:
    ranges = ((start, n), (0, end - n))
  order = (_rng(seed, shard, epoch, j).permutation(int(lengths[j])) if shuffle
           else np.arange(int(lengths[j])))
  return Segment(ranges, order, position)


def locate(n: int, segment_size: int, seed: int, shard: int, position: int,
           shuffle: bool = True) -> tuple[int, int]:
  """Returns (q, skip): stream position `position` is element `skip` of segment q."""
  k = num_segments(n, segment_size)
  epoch, offset = divmod(position, n)
  cuts, _, visit = _epoch_layout(n, k, seed, shard, epoch, shuffle)
  lengths = np.diff(cuts)[visit]
  ends = np.cumsum(lengths)
  visit_index = int(np.searchsorted(ends, offset, side='right'))
  return epoch * k + visit_index, offset - int(ends[visit_index] - lengths[visit_index])
