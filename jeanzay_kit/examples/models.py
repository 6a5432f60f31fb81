"""Example models: an MLP and a small GPT, both splittable into pipeline stages.

Replace them with your own through `_target_` in conf/model/. A model used with the
pipeline modes needs `pipeline_chunk(index, count)` returning the part of the model that
stage `index` of `count` runs, keeping the original parameter names (so checkpoints and
digests are the same whatever the parallel mode), and a `loss(output, target)` method.
"""

from __future__ import annotations

import copy
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def _split(count: int, parts: int) -> list[range]:
    """Split `count` layers into `parts` contiguous runs, the larger runs first."""
    base, extra = divmod(count, parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


class _Splittable(nn.Module):
    """Blocks in a ModuleDict keyed by their index; ends may be absent on inner stages."""

    blocks: nn.ModuleDict
    activation_checkpointing: bool = False

    def _run_blocks(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks.values():
            if self.activation_checkpointing and self.training:
                # Recompute the block's activations in backward instead of storing them.
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return x

    def pipeline_chunk(self, index: int, count: int) -> nn.Module:
        """A deep copy holding only stage `index`'s blocks (and the ends it owns)."""
        if count > len(self.blocks):
            raise ValueError(
                f"{type(self).__name__} has {len(self.blocks)} blocks, cannot make {count} "
                "pipeline stages. HINT: use more layers or fewer parallel.pipeline_stages"
            )
        keep = _split(len(self.blocks), count)[index]
        chunk = copy.deepcopy(self)
        chunk.blocks = nn.ModuleDict({str(i): chunk.blocks[str(i)] for i in keep})
        for name in self._first_stage_modules():
            if index != 0:
                setattr(chunk, name, None)
        for name in self._last_stage_modules():
            if index != count - 1:
                setattr(chunk, name, None)
        return chunk

    def merge_chunks(self, chunks: list[nn.Module]) -> nn.Module:
        """One module viewing several chunks of this model (interleaved pipelines hold
        more than one), with the original parameter names; the parameters are shared."""
        if len(chunks) == 1:
            return chunks[0]
        view = copy.copy(chunks[0])
        view._modules = dict(chunks[0]._modules)  # a new dict: the chunk stays as it is
        view.blocks = nn.ModuleDict(
            {k: v for c in chunks for k, v in cast(nn.ModuleDict, c.blocks).items()}
        )
        for name in self._first_stage_modules() + self._last_stage_modules():
            setattr(
                view,
                name,
                next((getattr(c, name) for c in chunks if getattr(c, name) is not None), None),
            )
        return view

    def _first_stage_modules(self) -> tuple[str, ...]:
        return ()

    def _last_stage_modules(self) -> tuple[str, ...]:
        return ()


class MLP(_Splittable):
    """A residual MLP for synthetic regression: in -> depth x (Linear, GELU) -> out."""

    def __init__(self, in_dim: int = 32, hidden: int = 128, depth: int = 4, out_dim: int = 8):
        super().__init__()
        self.inp: nn.Module | None = nn.Linear(in_dim, hidden)
        self.blocks = nn.ModuleDict(
            {str(i): nn.Sequential(nn.Linear(hidden, hidden), nn.GELU()) for i in range(depth)}
        )
        self.out: nn.Module | None = nn.Linear(hidden, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inp is not None:
            x = self.inp(x)
        x = self._run_blocks(x)
        if self.out is not None:
            x = self.out(x)
        return x

    @staticmethod
    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(output.float(), target.float())

    def _first_stage_modules(self) -> tuple[str, ...]:
        return ("inp",)

    def _last_stage_modules(self) -> tuple[str, ...]:
        return ("out",)

    def flops_per_sample(self) -> float:
        """Training FLOPs per sample: 6 per weight (forward 2, backward 4)."""
        return 6.0 * sum(p.numel() for p in self.parameters() if p.dim() > 1)


class Block(nn.Module):
    """Pre-norm transformer block with causal self-attention."""

    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )
        self.n_head = n_head
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyGPT(_Splittable):
    """A small GPT over bytes: token and position embeddings, blocks, final norm, head."""

    def __init__(
        self,
        vocab_size: int = 256,
        block_size: int = 64,
        n_layer: int = 4,
        n_embd: int = 128,
        n_head: int = 4,
        dropout: float = 0.0,
    ):
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"model.n_embd={n_embd} is not divisible by model.n_head={n_head}")
        self.block_size = block_size
        self.tok_emb: nn.Module | None = nn.Embedding(vocab_size, n_embd)
        self.pos_emb: nn.Embedding | None = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleDict(
            {str(i): Block(n_embd, n_head, dropout) for i in range(n_layer)}
        )
        self.ln_f: nn.Module | None = nn.LayerNorm(n_embd)
        self.head: nn.Module | None = nn.Linear(n_embd, vocab_size, bias=False)
        self.apply(self._init)
        self._n_layer, self._n_embd = n_layer, n_embd

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_emb is not None and self.pos_emb is not None:
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.tok_emb(x) + self.pos_emb(pos)
        x = self._run_blocks(x)
        if self.ln_f is not None and self.head is not None:
            x = self.head(self.ln_f(x))
        return x

    @staticmethod
    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.flatten(0, 1).float(), target.flatten())

    def _first_stage_modules(self) -> tuple[str, ...]:
        return ("tok_emb", "pos_emb")

    def _last_stage_modules(self) -> tuple[str, ...]:
        return ("ln_f", "head")

    def flops_per_sample(self) -> float:
        """Training FLOPs per sequence (PaLM appendix B: 6N + 12 L T d per token), N the
        weights that multiply (every Linear's, the head's included). The embeddings are
        looked up, not multiplied: counting them (GPT-2's token embedding is a quarter of
        its weights) would overstate the FLOPs, and the MFU, by a third. nanoGPT drops
        the position embedding only because its head shares the token embedding's
        weights: the same count as this one."""
        n = sum(m.weight.numel() for m in self.modules() if isinstance(m, nn.Linear))
        per_token = 6 * n + 12 * self._n_layer * self.block_size * self._n_embd
        return float(per_token * self.block_size)
