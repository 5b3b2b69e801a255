"""Calling an RL step without a Trainer, for tests of one step."""


def without_trainer(module, backward=None) -> dict:
    """Give `module` what its step asks Lightning for: the optimizer of `configure_optimizers`, a
    backward straight through autograd (or `backward`), and `log_dict`/`log` that collect into the
    returned dict (the step's logged metrics)."""
    optimizer = module.configure_optimizers()
    module.optimizers = lambda: optimizer
    module.manual_backward = backward or (lambda loss: loss.backward())
    logged: dict = {}
    module.log_dict = lambda metrics, **_: logged.update(metrics)
    module.log = lambda *a, **k: None
    return logged
