"""The training problem the elastic workers solve, and its single-process
reference: least squares on a fixed data set by full-batch gradient descent."""
import numpy as np

LEARNING_RATE = 0.1
_rng = np.random.default_rng(7)
DATA_X = _rng.normal(size=(12, 4))  # 12 rows: equal shards at 1, 2, 3, 4 ranks
DATA_Y = DATA_X @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.01 * _rng.normal(size=12)


def initial_weights():
    return np.zeros(4)


def gradient(weights, x, y):
    """Mean gradient of 0.5 * (x @ w - y)^2 over the rows of x."""
    return x.T @ (x @ weights - y) / len(x)


def reference_weights(steps):
    weights = initial_weights()
    for _ in range(steps):
        weights = weights - LEARNING_RATE * gradient(weights, DATA_X, DATA_Y)
    return weights


def make_torch_model():
    """A linear model (float64, no bias) and SGD with momentum, from zero."""
    import torch
    model = torch.nn.Linear(DATA_X.shape[1], 1, bias=False, dtype=torch.float64)
    with torch.no_grad():
        model.weight.zero_()
    return model, torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)


def reference_torch(steps):
    """(weights, momentum buffer) after `steps` full-batch steps in one process."""
    import torch
    model, optimizer = make_torch_model()
    x, y = torch.from_numpy(DATA_X), torch.from_numpy(DATA_Y).unsqueeze(1)
    for _ in range(steps):
        optimizer.zero_grad()
        (0.5 * ((model(x) - y) ** 2).mean()).backward()
        optimizer.step()
    return (model.weight.detach().flatten().numpy(),
            optimizer.state[model.weight]["momentum_buffer"].flatten().numpy())


def make_optax_problem():
    """(params, optax.adamw, loss) in float64 (JAX_ENABLE_X64=1): a linear
    model with a 0-d bias, so that a sharded optimizer has a leaf of one row
    and one of 4, split unevenly at 3 ranks."""
    import jax.numpy as jnp
    import optax
    params = {"b": jnp.zeros(()), "w": jnp.zeros(DATA_X.shape[1])}

    def loss(params, x, y):
        return 0.5 * jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    return params, optax.adamw(LEARNING_RATE, weight_decay=0.01), loss


def reference_optax(steps):
    """(params, optimizer state) after `steps` full-batch adamw steps in one process."""
    import jax
    import optax
    params, tx, loss = make_optax_problem()
    state = tx.init(params)
    for _ in range(steps):
        updates, state = tx.update(jax.grad(loss)(params, DATA_X, DATA_Y), state, params)
        params = optax.apply_updates(params, updates)
    return params, state
