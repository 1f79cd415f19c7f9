"""Experiment configs: pass one by path or name to --config (vit_jax.configs.experiments)."""
