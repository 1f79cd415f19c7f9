"""The device mesh, batch and parameter sharding, jax.distributed start-up, device peaks."""
