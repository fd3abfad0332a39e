"""A jitted JAX function, for the driver hook's GPU test (tests/gpu/test_gpu_driver_hook.py)."""

import jax
import jax.numpy as jnp


@jax.jit
def step(w, x):
    return jnp.tanh(x @ w).sum() + jnp.sin(w).mean()


def main() -> None:
    w = jnp.ones((256, 256))  # site: weights
    x = jnp.ones((64, 256))  # site: inputs
    for _ in range(3):
        out = step(w, x)  # site: step
    out.block_until_ready()


if __name__ == "__main__":
    main()
