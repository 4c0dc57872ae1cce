"""Stand-in of ``pixal3d.pipelines.samplers.base``: ``Sampler``, the interface of a sampler
(``sample(model, noise, **kwargs)`` → an object with ``.samples``)."""
from abc import ABC, abstractmethod


class Sampler(ABC):
    @abstractmethod
    def sample(self, model, **kwargs):
        """Sample from a model."""
