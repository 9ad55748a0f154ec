r"""The optimizers of the training loop: :func:`make_optimizer` builds one from the
training settings in its fastest implementation (fused or multi-tensor; capturable for a
CUDA graph), and :class:`DirectFusedAdam` steps a fused Adam through its kernel directly,
without ``Adam.step``'s per-call bookkeeping."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

from botorch_nn_uq.training.config import OPTIMIZERS, TrainingConfig


def make_optimizer(
    parameters: list[Tensor] | list[dict[str, Any]],
    config: TrainingConfig,
    *,
    fused: bool,
    capturable: bool,
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
    r"""The optimizer of ``config`` (``config.optimizer``, its learning rate and weight
    decay) over ``parameters``, and its learning-rate schedule.

    Args:
        parameters: The tensors to train, or ``torch.optim`` parameter groups (dicts
            with ``"params"`` and options that replace ``config``'s for the group, e.g.
            ``"weight_decay"``).
        config: The training settings.
        fused: Use the optimizer's fastest implementation for ``parameters`` (fused where
            the optimizer and the device have one, else multi-tensor).
        capturable: Keep the optimizer's state on the device, so that its step can be
            captured in a CUDA graph.

    Returns:
        The optimizer, and the ``StepLR`` schedule of ``config.lr_decay_rate`` every
        ``config.lr_decay_steps`` steps (``None`` without decay).
    """
    optimizer_class = OPTIMIZERS[config.optimizer]
    options = {}
    if fused or capturable:
        tensors = [
            tensor
            for entry in parameters
            for tensor in (entry["params"] if isinstance(entry, dict) else [entry])
        ]
        options = _fast_optimizer_options(optimizer_class, tensors, capturable)
    optimizer = optimizer_class(
        parameters, lr=config.learning_rate, weight_decay=config.weight_decay, **options
    )
    scheduler = (
        torch.optim.lr_scheduler.StepLR(
            optimizer, step_size=config.lr_decay_steps, gamma=config.lr_decay_rate
        )
        if config.lr_decay_rate is not None
        else None
    )
    return optimizer, scheduler


#: The optimizers with a fused implementation (one kernel for every parameter).
_FUSED_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)


def _fast_optimizer_options(
    optimizer_class: type[torch.optim.Optimizer], parameters: list[Tensor], capturable: bool
) -> dict[str, bool]:
    r"""The options of ``optimizer_class``'s fastest implementation for ``parameters``:
    fused where the optimizer and the device have one, else multi-tensor (``foreach``);
    ``capturable`` (state kept on the device) for a CUDA graph."""
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    options = {"capturable": True} if capturable else {}
    devices = {p.device.type for p in parameters}
    floating = all(torch.is_floating_point(p) for p in parameters)
    if (
        optimizer_class in _FUSED_OPTIMIZERS
        and floating
        and devices <= set(_get_fused_kernels_supported_devices())
    ):
        return {**options, "fused": True}
    return {**options, "foreach": True}


def is_plain_fused_adam(optimizer: torch.optim.Optimizer) -> bool:
    r"""Whether ``optimizer`` is a fused ``Adam`` none of whose parameter groups has an
    option its kernel does not take directly (AMSGrad, maximisation, differentiable
    steps)."""
    if type(optimizer) is not torch.optim.Adam:
        return False
    return all(
        bool(group["fused"])
        and not group["amsgrad"]
        and not group["maximize"]
        and not group["differentiable"]
        and not group.get("decoupled_weight_decay", False)
        and not isinstance(group["lr"], Tensor)
        for group in optimizer.param_groups
    )


class DirectFusedAdam:
    r"""A fused ``torch.optim.Adam`` stepped through its kernel directly.

    ``Adam.step`` wraps the one fused kernel in per-call bookkeeping (hooks, profiling
    records, gradient-mode and compiler guards, regrouping the tensors by device and
    dtype), which costs about a tenth of a small network's whole training step on a CPU
    core. After the first step, which creates the optimizer's state, this calls the
    kernel itself on the same state: the same update. While optimizer step hooks are
    registered (``torch.optim.optimizer.register_optimizer_step_post_hook`` and the
    like), every step goes through ``Adam.step``, which runs them.

    Args:
        optimizer: A ``torch.optim.Adam`` with ``fused=True`` (one kernel call per
            parameter group).
    """

    def __init__(self, optimizer: torch.optim.Adam) -> None:
        self.optimizer = optimizer
        self.param_groups = optimizer.param_groups
        self._parameters = [list(group["params"]) for group in optimizer.param_groups]
        # Detached aliases: the kernel updates the weights in place, outside autograd.
        self._weights = [[parameter.detach() for parameter in group] for group in self._parameters]
        self._states: list[tuple[list[Tensor], list[Tensor], list[Tensor]]] | None = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        r"""Drop the gradients (the next backward pass creates them afresh)."""
        for group in self._parameters:
            for parameter in group:
                parameter.grad = None

    def step(self) -> None:
        r"""One Adam update of every parameter."""
        if self._states is None or self._hooked():
            self.optimizer.step()
            self._states = []
            for parameters in self._parameters:
                states = [self.optimizer.state[parameter] for parameter in parameters]
                self._states.append(
                    tuple(
                        [state[key] for state in states]
                        for key in ("exp_avg", "exp_avg_sq", "step")
                    )
                )
            return
        for group, parameters, weights, (exp_avgs, exp_avg_sqs, steps) in zip(
            self.param_groups, self._parameters, self._weights, self._states, strict=True
        ):
            beta1, beta2 = group["betas"]
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(
                weights,
                [parameter.grad for parameter in parameters],
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                amsgrad=False,
                maximize=False,
            )

    def _hooked(self) -> bool:
        r"""Whether step hooks are registered, globally or on the optimizer."""
        return bool(
            _global_optimizer_pre_hooks
            or _global_optimizer_post_hooks
            or self.optimizer._optimizer_step_pre_hooks
            or self.optimizer._optimizer_step_post_hooks
        )


#: What the loop steps: a torch optimizer, or a fused Adam stepped through its kernel.
Stepper = torch.optim.Optimizer | DirectFusedAdam
