"""User image folders and ImageNet-21k from local files, prepared as TFDS datasets.

`image_folder`: a folder laid out as `ROOT/<split>/<CLASS>/*.{jpg,jpeg,png}` (any case),
with at least `ROOT/train`. Every sub-folder of ROOT that holds class folders becomes a split
(`train`, `test`, `validation`, ...). A ROOT without `train/` whose own sub-folders are the
classes (`ROOT/<CLASS>/*.jpg`, torchvision's and timm's ImageFolder layout) is one split,
`train`: hold out part of it for evaluation with a split expression ('train[90%:]'). Labels are the sorted union of class-folder names over
all splits, so label ids agree between splits. The folder is prepared into the TFDS data dir
under `image_folder/<basename>_<fingerprint>/`, where the fingerprint hashes every file's
path, size and modification time: editing the folder gives a new fingerprint and a fresh
preparation on next use. Image bytes are stored unchanged (JPEGs stay JPEGs and keep the
fast crop-while-decoding path).

Unreadable images are skipped and counted, never fatal: while preparing, each file must
open with PIL as JPEG or PNG (a JPEG must also end with its end-of-image marker, which
catches truncated downloads). The first ten skipped files are logged by name, the count per
split after it, and every skipped path is stored in the prepared dataset's metadata
(`info.metadata['skipped_files']`; vit_jax.data.sources reports the count as `skipped_files`).

`imagenet21k`: the ImageNet-21k release (fall11_whole.tar or winter21_whole.tar.gz) from
local files. Prepare the manual dir as `<manual_dir>/imagenet21k/<wnid>/*.JPEG`, i.e. one
folder per synset, by extracting the archive and then every per-synset tar inside it
(fall11_whole.tar holds one n*.tar per synset):

    mkdir -p $MANUAL/imagenet21k && cd $MANUAL/imagenet21k
    tar xf /path/to/fall11_whole.tar            # yields n01440764.tar, ...
    for t in n*.tar; do mkdir "${t%.tar}" && tar xf "$t" -C "${t%.tar}" && rm "$t"; done

All images go to one split, `full`; labels are the sorted wnids. The registry holds out
`full[:25600]` for evaluation and trains on `full[51200:]`, as big_vision does.
"""
import dataclasses
import hashlib
import os
import re

from absl import logging
from etils import epath
from PIL import Image
import tensorflow_datasets as tfds

from vit_jax import errors

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png')
_LOGGED_SKIPS = 10


class UnreadableFolderError(ValueError):
  """Every image of a split of a local folder is unreadable."""


def list_class_folder(folder: str) -> dict[str, list[str]]:
  """Returns {class name: sorted image file names} for `folder/<CLASS>/*.{jpg,jpeg,png}`."""
  classes = {}
  for name in sorted(os.listdir(folder)):
    class_dir = os.path.join(folder, name)
    if not os.path.isdir(class_dir):
      continue
    classes[name] = sorted(
        f for f in os.listdir(class_dir)
        if f.lower().endswith(IMAGE_EXTENSIONS)
        and os.path.isfile(os.path.join(class_dir, f)))
  return classes


def image_problem(path: str) -> str | None:
  """Returns why TensorFlow could not decode the image file at `path`, or None if it can."""
  try:
    with Image.open(path) as im:
      fmt = im.format
      im.verify()
  except Exception as e:  # pylint: disable=broad-except
    # PIL raises many unrelated types for broken files; all mean "skip this file".
    return f'{type(e).__name__}: {e}'
  if fmt not in ('JPEG', 'PNG'):
    return f'format {fmt} is not JPEG or PNG'
  if fmt == 'JPEG':
    with open(path, 'rb') as f:
      f.seek(-2, os.SEEK_END)
      if f.read(2) != b'\xff\xd9':
        return 'truncated JPEG (no end-of-image marker)'
  return None


def _fingerprint(root: str, splits: dict[str, dict[str, list[str]]], flat: bool) -> str:
  h = hashlib.sha1()
  for split, classes in splits.items():
    for cls, files in classes.items():
      for f in files:
        st = os.stat(os.path.join(split_dir(root, split, flat), cls, f))
        h.update(f'{split}/{cls}/{f}:{st.st_size}:{st.st_mtime_ns}\n'.encode())
  return h.hexdigest()[:10]


@dataclasses.dataclass(eq=False)
class ImageFolderConfig(tfds.core.BuilderConfig):
  """One image folder: its root, class names and files per split."""
  root: str = ''
  class_names: tuple[str, ...] = ()
  files: dict[str, dict[str, list[str]]] = dataclasses.field(default_factory=dict)
  flat: bool = False  # ROOT/<CLASS>/*: the root itself is the train split


def split_dir(root: str, split: str, flat: bool) -> str:
  """The folder holding the class folders of `split`."""
  return root if flat else os.path.join(root, split)


def config_for_root(root: str) -> ImageFolderConfig:
  """Lists `root/<split>/<CLASS>/*` (or `root/<CLASS>/*`) and returns the builder config naming it."""
  root = os.path.abspath(os.path.expanduser(root))
  if not os.path.isdir(root):
    raise FileNotFoundError(f'Image folder {root} does not exist; check the path.')
  flat = not os.path.isdir(os.path.join(root, 'train'))
  splits = {}
  if flat:
    classes = list_class_folder(root)
    if any(classes.values()):
      splits['train'] = classes
  else:
    for split in sorted(os.listdir(root)):
      if os.path.isdir(os.path.join(root, split)):
        classes = list_class_folder(os.path.join(root, split))
        if classes:
          splits[split] = classes
  if not any(splits.get('train', {}).values()):
    where = root if flat else f'{root}/train'
    raise FileNotFoundError(
        f'Image folder {where} has no CLASS/*.jpg|jpeg|png files: lay it out as '
        'ROOT/CLASS/*.jpg, or ROOT/train/CLASS/*.jpg with ROOT/test/CLASS/*.jpg for '
        'evaluation')
  class_names = tuple(sorted({c for classes in splits.values() for c in classes}))
  base = re.sub(r'[^a-z0-9]+', '_', os.path.basename(root).lower()).strip('_')
  name = f'{base or "root"}_{_fingerprint(root, splits, flat)}'
  return ImageFolderConfig(
      name=name, version='1.0.0', description=f'Images under {root}', root=root,
      class_names=class_names, files=splits, flat=flat)


def _examples(folder: str, classes: dict[str, list[str]], class_names, skipped: list[str]):
  """Yields (key, example) for every readable image; appends unreadable paths to skipped."""
  label_of = {name: i for i, name in enumerate(class_names)}
  skipped_before = len(skipped)
  first_problem = None
  yielded = 0
  for cls, files in classes.items():
    for f in files:
      path = os.path.join(folder, cls, f)
      problem = image_problem(path)
      if problem:
        skipped.append(path)
        first_problem = first_problem or f'{path}: {problem}'
        if len(skipped) <= _LOGGED_SKIPS:
          logging.warning('Skipping unreadable image %s (%s)', path, problem)
        continue
      with open(path, 'rb') as fh:
        data = fh.read()
      yielded += 1
      yield f'{cls}/{f}', {'image': data, 'label': label_of[cls],
                           'file_name': f'{cls}/{f}'}
  if not yielded and first_problem:
    raise UnreadableFolderError(
        f'No readable image in {folder}: all {len(skipped) - skipped_before} files are '
        f'unreadable (first: {errors.first_line(first_problem)}); replace them with '
        'valid JPEG or PNG files.')
  if len(skipped) > skipped_before:
    logging.warning('%s: skipped %d unreadable image(s)', folder,
                    len(skipped) - skipped_before)


def _features(class_names) -> tfds.features.FeaturesDict:
  return tfds.features.FeaturesDict({
      'image': tfds.features.Image(shape=(None, None, 3)),
      'label': tfds.features.ClassLabel(names=list(class_names)),
      'file_name': tfds.features.Text(),
  })


class _SkipCounting:
  """Shares one list of skipped files with the metadata saved after generation."""

  def _skip_list(self) -> list[str]:
    # The list is filled while the split generators run; TFDS writes the metadata
    # after generation finishes, so it is saved complete.
    skipped = []
    self.info.metadata['skipped_files'] = skipped
    return skipped


class ImageFolder(_SkipCounting, tfds.core.GeneratorBasedBuilder):
  """Images in `ROOT/<split>/<CLASS>/*.{jpg,jpeg,png}`; build with config_for_root(ROOT)."""

  name = 'image_folder'
  # TFDS derives code_path through importlib_resources, absent from some installs.
  code_path = epath.Path(__file__)
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'Image bytes stored as found; unreadable files skipped.'}

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description=__doc__,
        features=_features(self.builder_config.class_names),
        supervised_keys=('image', 'label'),
        metadata=tfds.core.MetadataDict())

  def _split_generators(self, dl_manager):
    del dl_manager  # Local files only.
    config = self.builder_config
    skipped = self._skip_list()
    return {split: self._generate_examples(
        split_dir(config.root, split, config.flat), classes, config.class_names, skipped)
            for split, classes in config.files.items()}

  def _generate_examples(self, folder, classes, class_names, skipped):
    yield from _examples(folder, classes, class_names, skipped)


class Imagenet21k(_SkipCounting, tfds.core.GeneratorBasedBuilder):
  """ImageNet-21k from `<manual_dir>/imagenet21k/<wnid>/*.JPEG`, as one split `full`."""

  name = 'imagenet21k'
  code_path = epath.Path(__file__)
  VERSION = tfds.core.Version('1.0.0')
  RELEASE_NOTES = {'1.0.0': 'One split `full`, labels are the sorted wnids.'}
  MANUAL_DOWNLOAD_INSTRUCTIONS = """\
  Extract the ImageNet-21k release (fall11_whole.tar or winter21_whole.tar.gz, from
  https://image-net.org after registering) into <manual_dir>/imagenet21k/ with one folder
  per synset holding its images: <manual_dir>/imagenet21k/n01440764/*.JPEG, ...
  """

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self, description=__doc__,
        features=tfds.features.FeaturesDict({
            'image': tfds.features.Image(shape=(None, None, 3)),
            # Class names are set from the synset folders while preparing.
            'label': tfds.features.ClassLabel(),
            'file_name': tfds.features.Text(),
        }),
        supervised_keys=('image', 'label'),
        metadata=tfds.core.MetadataDict())

  def _split_generators(self, dl_manager):
    folder = os.path.join(dl_manager.manual_dir, 'imagenet21k')
    if not os.path.isdir(folder):
      raise FileNotFoundError(
          f'ImageNet-21k needs {folder}/<wnid>/*.JPEG; {self.MANUAL_DOWNLOAD_INSTRUCTIONS}')
    classes = list_class_folder(folder)
    class_names = tuple(classes)
    self.info.features['label'].names = list(class_names)
    return {'full': self._generate_examples(folder, classes, class_names,
                                            self._skip_list())}

  def _generate_examples(self, folder, classes, class_names, skipped):
    yield from _examples(folder, classes, class_names, skipped)

