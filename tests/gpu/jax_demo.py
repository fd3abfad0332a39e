"""A JAX training program, as a new user writes one, for `kname profile` with no settings.

tests/gpu/test_gpu_jax.py runs it as `kname profile --json profile.json -- python jax_demo.py` on a
GPU and checks that every call site in the profile is one of the lines below marked
`# site: MARKER` (each launches GPU work, or may), or that line marked ` (compile)`:

    a jitted MLP training step (jax.grad through the loss, optax's Adam) called twenty times,
    then five times more from a second line (XLA replays the CUDA graph it built at the first);
    a jax.vmap of a per-example function, jitted, and a lax.scan of a recurrence, jitted;
    eager ops (jnp on device arrays, outside any jit).

No kname setting: jax, jaxlib, optax and XLA's threads (compiling, autotuning, building its
CUDA graphs) are named after the program's lines. With JAX_DEMO_STREAMS=<path>, under `kname
profile --trace ...` (which keeps the streams), it writes the recorded streams there at its end
(the replay fixture tests/data/jax_h100.json) and prints, per site, how many launches came from
the main thread and how many from others (THREADS lines).
"""

from __future__ import annotations

import os
import threading

import jax
import jax.numpy as jnp
import optax

STEPS = 20
MORE_STEPS = 5


def init(key: jax.Array) -> dict:
    k1, k2 = jax.random.split(key)  # site: split
    return {
        "w1": jax.random.normal(k1, (512, 1024)) * 0.02,  # site: w1
        "b1": jnp.zeros(1024),  # site: b1
        "w2": jax.random.normal(k2, (1024, 10)) * 0.02,  # site: w2
        "b2": jnp.zeros(10),  # site: b2
    }


def loss_fn(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


optimizer = optax.adam(1e-3)


@jax.jit
def train_step(params: dict, opt_state: optax.OptState, x: jax.Array, y: jax.Array):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def per_example(w: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w).sum()


@jax.jit
def batched(w: jax.Array, xs: jax.Array) -> jax.Array:
    return jax.vmap(per_example, in_axes=(None, 0))(w, xs)


@jax.jit
def recurrence(w: jax.Array, h: jax.Array) -> jax.Array:
    def cell(h, _):
        h = jnp.tanh(h @ w)
        return h, h.sum()

    return jax.lax.scan(cell, h, None, length=16)[1]


def main() -> None:
    params = init(jax.random.PRNGKey(0))  # site: init
    opt_state = optimizer.init(params)  # site: opt-init
    x = jax.random.normal(jax.random.PRNGKey(1), (256, 512))  # site: x
    y = jax.random.randint(jax.random.PRNGKey(2), (256,), 0, 10)  # site: y
    for _ in range(STEPS):
        params, opt_state, loss = train_step(params, opt_state, x, y)  # site: step
    for _ in range(MORE_STEPS):
        params, opt_state, loss = train_step(params, opt_state, x, y)  # site: step-again
    print("loss", float(loss))  # site: loss
    xs = jnp.ones((64, 32))  # site: xs
    w = jnp.full((32, 32), 0.01)  # site: w
    for _ in range(5):
        out = batched(w, xs)  # site: vmap
    states = recurrence(w, xs)  # site: scan
    eager = jnp.sin(out) * 2.0 + states.sum()  # site: eager
    eager.block_until_ready()  # site: wait
    print("JAX DEMO DONE", eager.shape)


def record_streams(path: str) -> None:
    """The profile's streams to `path` (after stopping it), and per site the launches of the
    main thread and of others (THREADS site main others)."""
    from kname.profiling import mode

    session = mode._session
    session.stop()  # what the GPU finished so far is flushed into the streams
    main_thread = threading.main_thread().ident
    session.save_streams(path, demo="jax_demo.py", main_thread=main_thread)
    counts: dict[str, list[int]] = {}
    for launch in session.streams().launches:
        if launch.parent:
            continue  # the runtime's call inside another: counted once, as the outer
        count = counts.setdefault(launch.site, [0, 0])
        count[launch.thread != main_thread] += 1
    for site, (main, others) in sorted(counts.items()):
        print(f"THREADS {site!r} main={main} others={others}")
    nodes: dict[str, int] = {}
    for node in session.streams().graph_nodes:
        if node.event == "created":
            nodes[node.site] = nodes.get(node.site, 0) + 1
    for site, made in sorted(nodes.items()):
        print(f"GRAPH NODES {site!r} made={made}")


if __name__ == "__main__":
    main()
    if os.environ.get("JAX_DEMO_STREAMS"):
        record_streams(os.environ["JAX_DEMO_STREAMS"])
