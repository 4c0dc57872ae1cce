"""Stand-in of ``pixal3d.models.sparse_elastic_mixin`` (TRELLIS.2):
``SparseTransformerElasticMixin`` — the input size is the token count; ``with_mem_ratio(r)``
runs the first ``min(ceil((1 - r) · blocks) + 1, blocks)`` blocks under gradient checkpointing
(``use_checkpoint``) for the duration and yields the exact ratio ``1 - (that - 1) / blocks``
(1.0: nothing changes)."""
import math
from contextlib import contextmanager

from ..utils.elastic_utils import ElasticModuleMixin

__all__ = ['SparseTransformerElasticMixin']


class SparseTransformerElasticMixin(ElasticModuleMixin):
    def _get_input_size(self, x, *args, **kwargs):
        return x.feats.shape[0]

    @contextmanager
    def with_mem_ratio(self, mem_ratio=1.0):
        if mem_ratio == 1.0:
            yield 1.0
            return
        num_blocks = len(self.blocks)
        checkpointed = min(math.ceil((1 - mem_ratio) * num_blocks) + 1, num_blocks)
        for i in range(num_blocks):
            self.blocks[i].use_checkpoint = i < checkpointed
        try:
            yield 1 - (checkpointed - 1) / num_blocks
        finally:
            for i in range(num_blocks):
                self.blocks[i].use_checkpoint = False
