"""Datasets by name as TFDS builders: resolve a name, prepare the data, read its info.

`config.dataset` names one of:
  cifar10, cifar100, imagenet2012, imagenet21k, oxford_iiit_pet, oxford_flowers102, tf_flowers,
  imagenet2012_real, imagenet_v2    evaluation only (config.evals.<name>.dataset)
  mnist5k, digits                   embedded real digits, no download (vit_jax.data.builders)
  synthetic[/<config>]              generated images (vit_jax.data.builders.synthetic)
  vtab/<task>                       a VTAB-1k task: trains on its train800val200 split
  vtab_demo/<name>                  mnist5k or digits in VTAB-1k's split layout (python -m vit_jax.vtab)
  folder:<ROOT>                     your images in ROOT/{train,test}/<CLASS>/*.{jpg,jpeg,png}
                                    (evaluates on test/, else validation/ or val/)
  tfds:<name>[:<version>]           any other TFDS image classification dataset with
                                    'image' and 'label' features (splits default to train/test)
The named ones are the table of vit_jax.data.catalog.

Manual downloads: imagenet2012 needs ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar
(imagenet2012_real the latter) in
`config.manual_dir` (default <data_dir>/downloads/manual); imagenet21k needs its synsets
extracted as <manual_dir>/imagenet21k/<wnid>/*.JPEG (see vit_jax/data/builders/image_folder.py).

Sizes, class counts and label names come from the prepared TFDS dataset when it is there;
before preparation the catalog's known values answer for the default splits, so the info of
e.g. cifar10 is known without a download. Embedded datasets and folders are always prepared
on first use (seconds), since that needs no network.
"""
import contextlib
import dataclasses
import fcntl
import io
import logging
import os

from absl import logging as absl_logging
import tensorflow_datasets as tfds

from vit_jax import errors
from vit_jax import fileio
from vit_jax.data import builders
from vit_jax.data import catalog
from vit_jax.data.catalog import DATASETS
from vit_jax.data.catalog import DatasetInfo
from vit_jax.data.catalog import DatasetSpec
from vit_jax.data.catalog import check_name
from vit_jax.data.catalog import known_names


def resolve(name: str, label_key: str = '') -> DatasetSpec:
  """Returns the DatasetSpec of a dataset name; unknown names raise a ValueError.

  `label_key` ('' = the dataset's) reads the labels from that feature instead.
  """
  spec = _resolve(name)
  if label_key and label_key != spec.label_key:
    spec = dataclasses.replace(spec, label_key=label_key, label_fn='', label_names=(),
                               num_classes=-1)
  return spec


def _resolve(name: str) -> DatasetSpec:
  check_name(name)
  if name in DATASETS:
    return DATASETS[name]
  if name == 'synthetic' or name.startswith('synthetic/'):
    cfg = builders.synthetic.config_from_name(name.partition('/')[2] or 'small')
    return DatasetSpec('synthetic', 'train', 'test', cfg.num_classes, cfg.num_train,
                       cfg.num_test, builder_config=cfg, local=True)
  if name.startswith('folder:'):
    cfg = builders.image_folder.config_for_root(name[len('folder:'):])
    eval_split = next((s for s in ('test', 'validation', 'val') if s in cfg.files), '')
    return DatasetSpec('image_folder', 'train', eval_split, len(cfg.class_names),
                       label_names=cfg.class_names, builder_config=cfg, local=True)
  return DatasetSpec(name[len('tfds:'):], 'train', 'test', -1)  # tfds:<name>


class _CustomConfigFilter(logging.Filter):
  """Drops TFDS's 'Using custom data configuration' warning: our builders are made so."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith('Using custom data configuration')


@contextlib.contextmanager
def _custom_config_quiet():
  """Keeps the builder's config warning (once per builder made) out of the log."""
  quiet = _CustomConfigFilter()
  logger = logging.getLogger('absl')
  logger.addFilter(quiet)
  try:
    yield
  finally:
    logger.removeFilter(quiet)


@contextlib.contextmanager
def _preparation_quiet():
  """Keeps TFDS's stdout banners and progress bars out of the run log while preparing.

  TFDS prints 'Downloading and preparing dataset Unknown size' even for data that
  downloads nothing; the caller logs one line of its own instead.
  """
  tfds.display_progress_bar(False)
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      yield
  finally:
    tfds.display_progress_bar(True)  # TFDS's default


def make_builder(spec: DatasetSpec, data_dir: str | None):
  """Returns the TFDS builder of a spec (not prepared)."""
  kwargs = {'data_dir': data_dir}
  if spec.builder_config is not None:
    kwargs['config'] = spec.builder_config
  try:
    with _custom_config_quiet():
      return tfds.builder(spec.tfds_name, **kwargs)
  except tfds.core.registered.DatasetNotFoundError as e:
    raise ValueError(f'TFDS has no dataset {spec.tfds_name!r} '
                     f'(known here: {", ".join(known_names())})') from e


def is_prepared(builder) -> bool:
  """Whether the builder's TFRecords and dataset_info.json exist in its data dir."""
  return bool(builder.info.splits) and builder.data_path.exists()


@contextlib.contextmanager
def _lock(data_dir_root: str, name: str):
  """Serialises preparation among processes sharing a local data dir."""
  if fileio.is_remote(data_dir_root):
    yield  # Remote file systems have no flock; prepare such data dirs ahead of time.
    return
  os.makedirs(data_dir_root, exist_ok=True)
  path = os.path.join(data_dir_root, f'.{name.replace("/", "_")}.lock')
  with open(path, 'w') as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def _local_cause(e: BaseException) -> BaseException | None:
  """The FileNotFoundError/UnreadableFolderError behind a TFDS error, if any."""
  seen = []
  while e is not None and e not in seen:
    if isinstance(e, (FileNotFoundError, builders.image_folder.UnreadableFolderError)):
      return e
    seen.append(e)
    e = e.__cause__ or e.__context__
  return None


class PrepareError(OSError):
  """A dataset could not be prepared (download, checksum or source files); one line."""


def prepare(spec: DatasetSpec, data_dir: str | None, manual_dir: str | None = None):
  """Prepares the dataset into data_dir if it is not there yet; returns a fresh builder."""
  builder = make_builder(spec, data_dir)
  if is_prepared(builder):
    return builder
  root = str(builder.data_dir_root)
  manual_dir = manual_dir or os.path.join(root, 'downloads', 'manual')
  catalog.check_manual_files(spec, spec.tfds_name, manual_dir)
  with _lock(root, f'{builder.name}_{builder.builder_config.name if builder.builder_config else ""}'):
    builder = make_builder(spec, data_dir)  # Another process may have prepared it meanwhile.
    if not is_prepared(builder):
      absl_logging.info('Preparing %s into %s (first use only).', spec.tfds_name,
                        builder.data_dir)
      try:
        # Downloads keep TFDS's progress bars; local data is prepared in seconds.
        quiet = _preparation_quiet() if spec.local else contextlib.nullcontext()
        with quiet, _custom_config_quiet():
          builder.download_and_prepare(
              download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
      except Exception as e:  # pylint: disable=broad-except
        # TFDS surfaces download, checksum and manual-dir problems as many error types;
        # each becomes one line naming the dataset and the data dir.
        if spec.local:
          # Local files: no network is involved, so the cause itself is the message.
          cause = _local_cause(e)
          if cause is not None:
            raise cause from None
        fault = fileio.write_fault(e, root)
        if fault is not None:  # no download advice: the disk, not the source, failed
          raise PrepareError(
              f'Could not prepare {spec.tfds_name} into {root}: {fault}; make room there '
              '(or set config.data_dir to another disk) and run the same command again'
          ) from None
        raise PrepareError(
            f'Could not prepare {spec.tfds_name} into {root}: {errors.first_line(e)}. '
            f'Prepare it where the network reaches its source (tfds build '
            f'{spec.tfds_name} --data_dir={root}) or point config.data_dir at a prepared '
            'copy') from e
  return make_builder(spec, data_dir)


def split_size(builder, split: str) -> int:
  """Returns the number of examples of a split expression such as 'train[:800]+test'."""
  try:
    return builder.info.splits[split].num_examples
  except (KeyError, ValueError, AssertionError) as e:
    reason = ' '.join(str(e).split())  # TFDS spreads its reasons over lines
    raise ValueError(
        f'Bad split {split!r} for {builder.name}: {reason}; available splits: '
        f'{", ".join(builder.info.splits.keys())}') from None


def check_split(spec: DatasetSpec, data_dir: str | None, split: str, key: str) -> None:
  """One-line error naming config `key` for a split expression that cannot be read.

  A prepared dataset checks the split against its real splits and sizes; one not
  prepared yet (a download) checks the expression's syntax without preparing it.
  """
  builder = make_builder(spec, data_dir)
  try:
    if is_prepared(builder):
      split_size(builder, split)
    else:
      tfds.core.ReadInstruction.from_spec(split)
  except (ValueError, AssertionError) as e:
    raise ValueError(f'{key}={split!r}: {" ".join(str(e).split())}') from None


def _class_feature(builder, spec: DatasetSpec):
  """The ClassLabel of the label feature (inside it for a list of classes), else None."""
  features = builder.info.features
  if spec.label_fn or spec.label_key not in features:
    return None
  feature = features[spec.label_key]
  if isinstance(feature, tfds.features.Sequence):  # label sets, e.g. ReaL's real_label
    feature = feature.feature
  return feature


def _label_names(builder, spec: DatasetSpec, num_classes: int) -> list[str]:
  if spec.label_names:
    return list(spec.label_names)
  feature = _class_feature(builder, spec)
  if hasattr(feature, 'names'):
    names = list(feature.names or [])
    if len(names) == num_classes:
      return names
  return [str(i) for i in range(num_classes)]


def _num_classes(builder, spec: DatasetSpec) -> int:
  if spec.num_classes > 0 and (spec.label_fn or not is_prepared(builder)):
    return spec.num_classes
  num = getattr(_class_feature(builder, spec), 'num_classes', None)
  if num:
    return int(num)
  if spec.num_classes > 0:
    return spec.num_classes
  raise ValueError(f'{spec.tfds_name}: feature {spec.label_key!r} is not a class label; '
                   'vit_jax trains on image classification datasets')


def get_dataset_info(config, label_key: str = '', train: bool = True) -> DatasetInfo:
  """Returns sizes, class count, label names and resolved splits of config.dataset.

  `label_key` ('' = the dataset's): the class count and names of that label feature.
  train=False: data only evaluated; its training split is not read (num_train 0).
  """
  spec = resolve(config.dataset, label_key)
  _train_split(config, spec, train)  # before preparing: an evaluation set may download
  data_dir = config.get('data_dir')
  builder = make_builder(spec, data_dir)
  known = (not config.train_split or config.train_split == spec.train_split) and (
      not config.eval_split or config.eval_split == spec.eval_split) and (
          spec.num_train is not None and spec.num_eval is not None)
  if spec.local or (not is_prepared(builder) and not known):
    builder = prepare(spec, data_dir, config.get('manual_dir'))
  return info_from_builder(config, spec, builder, train)


def _train_split(config, spec: DatasetSpec, train: bool) -> str:
  """The training split ('' with train=False); one line for a dataset only for evaluation."""
  if not train:
    return ''
  if not (config.train_split or spec.train_split):
    raise ValueError(f'{config.dataset} is for evaluation only (it has no training split): '
                     'train on another dataset and score this one with config.evals.<name>.'
                     f'dataset={config.dataset!r}, or name a split with config.train_split')
  return config.train_split or spec.train_split


def info_from_builder(config, spec: DatasetSpec, builder, train: bool = True) -> DatasetInfo:
  """Returns the DatasetInfo of config's splits, from a builder (prepared or not)."""
  train_split = _train_split(config, spec, train)
  eval_split = config.eval_split or spec.eval_split
  if is_prepared(builder):
    num_train = split_size(builder, train_split) if train_split else 0
    num_eval = split_size(builder, eval_split) if eval_split else 0
  else:
    num_train, num_eval = (spec.num_train if train else 0), spec.num_eval
  num_classes = _num_classes(builder, spec)
  skipped = 0
  if is_prepared(builder) and builder.info.metadata:
    skipped = len(builder.info.metadata.get('skipped_files', []))
  return DatasetInfo(
      name=config.dataset, num_classes=num_classes, train_split=train_split,
      eval_split=eval_split, num_train=num_train, num_eval=num_eval,
      label_names=_label_names(builder, spec, num_classes), skipped_files=skipped)
