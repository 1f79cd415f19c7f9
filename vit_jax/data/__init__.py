"""Data: the dataset table (catalog), TFDS builders and preparation (sources, builders),
per-example preprocessing and the tf.data pipeline that feeds global jax.Arrays.

The package imports nothing by itself, so the catalog can be read without TFDS.
"""
