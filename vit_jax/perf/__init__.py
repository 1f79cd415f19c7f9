"""Step and input benchmarks, memory per device, profile summaries (python -m vit_jax.perf.<tool>)."""
