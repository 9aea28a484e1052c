"""A tiny random-weight Llama, made on the spot (no hub, no torch): GGUF for llama.cpp, or a Hugging Face
directory for `transformers serve`. Deterministic for a seed, and every request runs to exactly
`max_tokens`: the special tokens can never be sampled (shared/reference/engines.md)."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIALS = ["<unk>", "<s>", "</s>"]
VOCAB = 1024


@dataclass(frozen=True)
class Shape:
    """The model's size."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    ffn: int = 128
    vocab: int = VOCAB
    context: int = 4096


def train_tokenizer(seed: int = 0, vocab: int = VOCAB) -> Any:
    """A byte-level BPE over random pseudo-words; every token decodes to non-empty ASCII."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(seed)
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 8))) for _ in range(4000)]
    corpus = [" ".join(rng.sample(words, 12)) for _ in range(800)] + [string.printable]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=[],
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def _weights(shape: Shape, seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    h, f, v = shape.hidden, shape.ffn, shape.vocab

    def rand(*dims: int) -> Any:
        return (rng.standard_normal(dims) * 0.05).astype(np.float32)

    emb = rand(v, h)
    emb[:, 0] = 1.0  # residual dimension 0 holds a constant 1.0 ...
    out = rand(v, h)
    out[:, 0] = 0.0
    out[: len(SPECIALS), :] = 0.0
    out[: len(SPECIALS), 0] = -10.0  # ... that only the special tokens read, pushing their logits near -80.
    w: dict[str, Any] = {"token_embd.weight": emb, "output.weight": out,
                         "output_norm.weight": np.ones(h, dtype=np.float32)}
    for i in range(shape.layers):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(h, dtype=np.float32)
        w[p + "ffn_norm.weight"] = np.ones(h, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v"):
            w[p + name + ".weight"] = rand(h, h)
        o = rand(h, h)
        o[0, :] = 0.0  # nothing writes into dimension 0
        w[p + "attn_output.weight"] = o
        w[p + "ffn_gate.weight"] = rand(f, h)
        w[p + "ffn_up.weight"] = rand(f, h)
        down = rand(h, f)
        down[0, :] = 0.0
        w[p + "ffn_down.weight"] = down
    return w


def write_gguf(path: Path, seed: int = 0, shape: Shape = Shape(), weights_seed: int | None = None) -> Path:
    """Write the tiny model as GGUF (fp32, about 0.9 MB) and return its path; `weights_seed` (default `seed`) draws
    other weights under the same tokenizer: a draft model a speculative engine accepts beside the target."""
    import gguf

    tok = train_tokenizer(seed, shape.vocab)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    model = tok.to_str()
    import json

    merges = json.loads(model)["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("glm5-tiny-test")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.hidden)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.heads)
    w.add_rope_dimension_count(shape.hidden // shape.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t, _ in vocab])
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    for name, tensor in _weights(shape, seed if weights_seed is None else weights_seed).items():
        w.add_tensor(name, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_hf(folder: Path, seed: int = 0, shape: Shape = Shape()) -> Path:
    """Write the tiny model as a Hugging Face folder (LlamaForCausalLM + fast tokenizer); needs torch."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = train_tokenizer(seed, shape.vocab)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    cfg = LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn,
                      num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                      num_key_value_heads=shape.heads, max_position_embeddings=shape.context,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    w = _weights(shape, seed)
    sd = {"model.embed_tokens.weight": w["token_embd.weight"], "lm_head.weight": w["output.weight"],
          "model.norm.weight": w["output_norm.weight"]}
    for i in range(shape.layers):
        p, q = f"blk.{i}.", f"model.layers.{i}."
        sd.update({q + "input_layernorm.weight": w[p + "attn_norm.weight"],
                   q + "post_attention_layernorm.weight": w[p + "ffn_norm.weight"],
                   q + "self_attn.q_proj.weight": w[p + "attn_q.weight"],
                   q + "self_attn.k_proj.weight": w[p + "attn_k.weight"],
                   q + "self_attn.v_proj.weight": w[p + "attn_v.weight"],
                   q + "self_attn.o_proj.weight": w[p + "attn_output.weight"],
                   q + "mlp.gate_proj.weight": w[p + "ffn_gate.weight"],
                   q + "mlp.up_proj.weight": w[p + "ffn_up.weight"],
                   q + "mlp.down_proj.weight": w[p + "ffn_down.weight"]})
    model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
