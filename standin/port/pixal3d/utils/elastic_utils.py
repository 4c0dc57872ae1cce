"""Stand-in of ``pixal3d.utils.elastic_utils`` (TRELLIS.2): ``MemoryController`` (the interface
a training loop's controller implements: ``get_mem_ratio(input_size)``,
``update_run_states(input_size, mem_ratio)``) and ``ElasticModuleMixin``, which wraps a model's
forward: with a controller registered, in training mode and with gradients enabled, the forward
runs inside ``with_mem_ratio(controller.get_mem_ratio(input_size))`` and reports the ratio
used; otherwise (inference, as the pipeline runs it) it is the model's own forward. The real
``LinearMemoryController`` (a CUDA memory model fitted during training) is not in the stand-in.
"""
from abc import abstractmethod
from contextlib import contextmanager

import torch

__all__ = ['MemoryController', 'ElasticModuleMixin']


class MemoryController:
    """What ``ElasticModuleMixin`` asks of a training loop's memory controller."""

    _last_input_size = None
    _last_mem_ratio = []

    def update_run_states(self, input_size=None, mem_ratio=None):
        if self._last_input_size is None:
            self._last_input_size = input_size
        elif self._last_input_size != input_size:
            raise ValueError('Input size should not change for different ElasticModules.')
        self._last_mem_ratio.append(mem_ratio)

    @abstractmethod
    def get_mem_ratio(self, input_size):
        pass


class ElasticModuleMixin:
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._memory_controller = None

    @abstractmethod
    def _get_input_size(self, *args, **kwargs) -> int:
        pass

    @abstractmethod
    @contextmanager
    def with_mem_ratio(self, mem_ratio=1.0):
        pass

    def register_memory_controller(self, memory_controller: MemoryController):
        self._memory_controller = memory_controller

    def forward(self, *args, **kwargs):
        if self._memory_controller is None or not torch.is_grad_enabled() or not self.training:
            return super().forward(*args, **kwargs)
        input_size = self._get_input_size(*args, **kwargs)
        mem_ratio = self._memory_controller.get_mem_ratio(input_size)
        with self.with_mem_ratio(mem_ratio) as exact_mem_ratio:
            ret = super().forward(*args, **kwargs)
        self._memory_controller.update_run_states(input_size, exact_mem_ratio)
        return ret
