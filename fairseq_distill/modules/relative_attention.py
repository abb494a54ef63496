"""Self-attention with relative position representations (Shaw et al., 2018).

For query position i and key position j, with r = clip(j − i, −k, k):

    e_ij = q_i · (k_j + a^K_r) / √d        z_i = Σ_j softmax(e_i)_j · (v_j + a^V_r)

with learned embeddings a^K (and, with ``relative_values``, a^V) of the 2k + 1 clipped
distances, shared by all heads as in the paper. A subclass of fairseq's
``MultiheadAttention``: projections, initialisation, dropout and the incremental-state
buffers (and their reordering during beam search) are fairseq's; only the score and
output computation is new. In incremental decoding the query is the last of the
positions seen so far, so a decoding step equals the matching row of a full forward.
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor


def relative_buckets(query_len: int, key_len: int, max_distance: int, device) -> Tensor:
    """T x S indices into the 2k + 1 embeddings; queries are the last ``query_len`` positions."""
    query_pos = torch.arange(key_len - query_len, key_len, device=device)
    key_pos = torch.arange(key_len, device=device)
    return (key_pos[None, :] - query_pos[:, None]).clamp(-max_distance, max_distance) + max_distance


class RelativeMultiheadAttention(MultiheadAttention):
    def __init__(self, embed_dim, num_heads, max_relative_length, relative_values=False,
                 dropout=0.0, bias=True):
        super().__init__(embed_dim, num_heads, dropout=dropout, bias=bias, self_attention=True)
        if max_relative_length < 1:
            raise ValueError(f"max_relative_length must be >= 1, got {max_relative_length}")
        self.max_relative_length = max_relative_length
        self.relative_keys = nn.Embedding(2 * max_relative_length + 1, self.head_dim)
        nn.init.normal_(self.relative_keys.weight, std=self.head_dim ** -0.5)
        self.relative_values = None
        if relative_values:
            self.relative_values = nn.Embedding(2 * max_relative_length + 1, self.head_dim)
            nn.init.normal_(self.relative_values.weight, std=self.head_dim ** -0.5)

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,  # accepted for interface compatibility: self-attention only
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ):
        if before_softmax:
            raise NotImplementedError("RelativeMultiheadAttention does not return pre-softmax scores")
        tgt_len, bsz, embed_dim = query.size()
        heads, head_dim = self.num_heads, self.head_dim

        def split(x):  # T x B x C -> (B·H) x T x d
            return x.contiguous().view(-1, bsz * heads, head_dim).transpose(0, 1)

        q = split(self.q_proj(query) * self.scaling)
        k, v = split(self.k_proj(query)), split(self.v_proj(query))

        if incremental_state is not None:
            saved = self._get_input_buffer(incremental_state)
            if saved.get("prev_key") is not None:
                k = torch.cat([saved["prev_key"].view(bsz * heads, -1, head_dim), k], dim=1)
                v = torch.cat([saved["prev_value"].view(bsz * heads, -1, head_dim), v], dim=1)
            previous_mask = saved.get("prev_key_padding_mask")
            if key_padding_mask is not None or previous_mask is not None:
                now = key_padding_mask if key_padding_mask is not None else \
                    torch.zeros(bsz, tgt_len, dtype=torch.bool, device=query.device)
                before = previous_mask if previous_mask is not None else \
                    torch.zeros(bsz, k.size(1) - tgt_len, dtype=torch.bool, device=query.device)
                key_padding_mask = torch.cat([before.bool(), now.bool()], dim=1)
            saved["prev_key"] = k.view(bsz, heads, -1, head_dim)
            saved["prev_value"] = v.view(bsz, heads, -1, head_dim)
            saved["prev_key_padding_mask"] = key_padding_mask
            incremental_state = self._set_input_buffer(incremental_state, saved)

        src_len = k.size(1)
        buckets = relative_buckets(tgt_len, src_len, self.max_relative_length, query.device)
        scores = torch.bmm(q, k.transpose(1, 2))
        # q_i · a^K_{r(i,j)} for every (i, j): (B·H) x T x d against T x S x d
        scores = scores + torch.einsum("ntd,tsd->nts", q, self.relative_keys(buckets))
        if attn_mask is not None:
            scores = scores + attn_mask.unsqueeze(0)
        if key_padding_mask is not None:
            scores = scores.view(bsz, heads, tgt_len, src_len).masked_fill(
                key_padding_mask[:, None, None, :].to(torch.bool), float("-inf")
            ).view(bsz * heads, tgt_len, src_len)

        probs_float = utils.softmax(scores, dim=-1)
        probs = self.dropout_module(probs_float.type_as(scores))
        out = torch.bmm(probs, v)
        if self.relative_values is not None:
            out = out + torch.einsum("nts,tsd->ntd", probs, self.relative_values(buckets))
        out = self.out_proj(out.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim))

        weights = None
        if need_weights or need_head_weights:
            weights = probs_float.view(bsz, heads, tgt_len, src_len).transpose(1, 0)
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return out, weights
