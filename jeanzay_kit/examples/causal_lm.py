"""A Hugging Face-style causal language model written in plain torch: called with a dict
batch (`model(**batch)`: input_ids, attention_mask, labels), it returns an output with
`.loss` and `.logits`, as `transformers` models do. Train it with `loss=output`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from jeanzay_kit.examples.models import TinyGPT

IGNORE_INDEX = -100  # transformers' label for "no loss here"


@dataclass
class CausalLMOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor


class TinyCausalLM(nn.Module):
    def __init__(
        self,
        vocab_size: int = 256,
        block_size: int = 64,
        n_layer: int = 2,
        n_embd: int = 64,
        n_head: int = 4,
    ):
        super().__init__()
        self.transformer = TinyGPT(vocab_size, block_size, n_layer, n_embd, n_head)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> CausalLMOutput:
        logits = self.transformer(input_ids)
        loss = None
        if labels is not None:
            # Position t predicts token t + 1; padding (attention_mask 0) counts for nothing.
            targets = labels[:, 1:]
            if attention_mask is not None:
                targets = targets.masked_fill(attention_mask[:, 1:] == 0, IGNORE_INDEX)
            loss = F.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX
            )
        return CausalLMOutput(loss, logits)
