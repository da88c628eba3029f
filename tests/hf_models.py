"""Small Hugging Face models with random weights, saved with a tokenizer trained here: what the tests open with
``gptviz.from_pretrained`` (the hub can't be reached, and nothing is downloaded)."""
import torch

TEXT = "the cat sat on the mat, and the dog sat on the log. the cat ran."


def train_tokenizer(folder, vocab_size: int, sentencepiece_style: bool = False) -> None:
    """A BPE tokenizer trained here on a little text and saved as tokenizer.json: byte-level (GPT-2's kind) or
    SentencePiece-style (▁ for spaces, Llama's kind), with an end-of-text token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None if not sentencepiece_style else "<unk>"))
    if sentencepiece_style:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        specials = ["<unk>", "<s>", "</s>"]
        alphabet = []
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        specials = ["<|endoftext|>"]
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator([TEXT] * 20, trainer)
    tok.save(str(folder / "tokenizer.json"))


@torch.no_grad()
def randomise(model) -> None:
    g = torch.Generator().manual_seed(1)
    for name, p in model.named_parameters():
        base = 1.0 if p.dim() == 1 and "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) \
            else 0.0
        p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))


def build(family: str, folder, **extra):
    """A random ``transformers`` model of ``family`` saved in ``folder`` with a tokenizer trained here."""
    import transformers as T
    vocab = 300
    if family == "gpt2":
        cfg = T.GPT2Config(vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=64, **extra)
        cls = T.GPT2LMHeadModel
    elif family == "llama":
        cfg = T.LlamaConfig(vocab_size=vocab, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                            num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                            rope_theta=5000.0, tie_word_embeddings=False, **extra)
        cls = T.LlamaForCausalLM
    elif family == "qwen2":
        cfg = T.Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=56, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=1, head_dim=12, max_position_embeddings=64,
                            tie_word_embeddings=True, **extra)
        cls = T.Qwen2ForCausalLM
    elif family == "qwen3":  # QK-norm; head_dim 12 (not 32 / 4), 2 key/value heads; tied unless told
        cfg = T.Qwen3Config(**{"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 56, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
                               "max_position_embeddings": 64, "tie_word_embeddings": True, **extra})
        cls = T.Qwen3ForCausalLM
    elif family == "mistral":
        cfg = T.MistralConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                              **{"sliding_window": None, **extra})  # no window unless the test gives one
        cls = T.MistralForCausalLM
    elif family == "gemma":  # head_dim 32, not 64/4; one key/value head (multi-query, as Gemma 2b) unless told
        cfg = T.GemmaConfig(**{"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 96,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
                               "head_dim": 32, "max_position_embeddings": 64, **extra})
        cls = T.GemmaForCausalLM
    elif family == "mixtral":  # 4 experts of 24, top-2; grouped-query attention
        cfg = T.MixtralConfig(**{"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 24,
                                 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                 "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 64,
                                 "sliding_window": None, **extra})
        cls = T.MixtralForCausalLM
    elif family == "qwen2_moe":  # 6 experts of 16, top-2, a shared expert of 20; layer 0 dense unless told
        cfg = T.Qwen2MoeConfig(**{"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 40,
                                  "moe_intermediate_size": 16, "shared_expert_intermediate_size": 20,
                                  "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                                  "num_experts": 6, "num_experts_per_tok": 2, "mlp_only_layers": [0],
                                  "max_position_embeddings": 64, **extra})
        cls = T.Qwen2MoeForCausalLM
    elif family == "olmoe":  # 6 experts of 24, top-3, QK-norm over the whole projections; 2 key/value heads
        cfg = T.OlmoeConfig(**{"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 24,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "num_experts": 6, "num_experts_per_tok": 3, "max_position_embeddings": 64,
                               "pad_token_id": None, "eos_token_id": None, **extra})
        cls = T.OlmoeForCausalLM
    elif family == "gpt_oss":  # sinks, biases, 4 experts of 24, top-2; layer 0 slides (window 8), layer 1 full
        cfg = T.GptOssConfig(**{"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 24,
                                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2,
                                "max_position_embeddings": 64, "sliding_window": 8,
                                "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                                                    "original_max_position_embeddings": 16, "beta_fast": 32.0,
                                                    "beta_slow": 1.0, "truncate": False}, **extra})
        cls = T.GptOssForCausalLM
    elif family == "phi3":  # fused qkv_proj and gate_up_proj; 2 key/value heads; no window unless told
        cfg = T.Phi3Config(**{"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 48, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
                              "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, **extra})
        cls = T.Phi3ForCausalLM
    elif family == "gemma2":  # 4 layers (0 and 2 slide: window 8), head_dim 12 (not 32 / 4), 2 key/value heads,
        # query_pre_attn_scalar 20 (not head_dim) and caps small enough to bite on random weights
        cfg = T.Gemma2Config(**{"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12,
                                "max_position_embeddings": 64, "query_pre_attn_scalar": 20, "sliding_window": 8,
                                "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0, **extra})
        cls = T.Gemma2ForCausalLM
    elif family == "gemma3_text":  # as gemma2, with QK-norm, no caps, and local layers (0, 2) with their own base
        cfg = T.Gemma3TextConfig(**{
            "vocab_size": vocab, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "max_position_embeddings": 64,
            "query_pre_attn_scalar": 20, "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 300.0}},
            **extra})
        cls = T.Gemma3ForCausalLM
    elif family == "olmo2":  # norms after the sublayers, QK-norm over the whole projections; 2 key/value heads
        cfg = T.Olmo2Config(**{"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
                               "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}, "eos_token_id": 2,
                               **extra})
        cls = T.Olmo2ForCausalLM
    else:
        cfg = T.GPTNeoXConfig(**{"vocab_size": vocab, "hidden_size": 48, "intermediate_size": 96,
                                 "num_hidden_layers": 2, "num_attention_heads": 3, "max_position_embeddings": 64,
                                 "rope_parameters": {"rope_type": "default", "rope_theta": 2000.0,
                                                     "partial_rotary_factor": 0.25}, **extra})
        cls = T.GPTNeoXForCausalLM
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(cfg).eval()
    randomise(model)
    if family in ("gemma", "gemma2", "gemma3_text"):  # Gemma stores each norm's gain as an offset w (applied as
        # 1 + w): random around 0
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.sub_(1.0)
    model.save_pretrained(str(folder))
    train_tokenizer(folder, vocab, sentencepiece_style=family in ("llama", "mistral", "gemma", "gemma2",
                                                                                 "gemma3_text"))
    return model


FAMILIES = ["gpt2", "llama", "qwen2", "mistral", "gpt_neox"]


def long_ids(tok, n: int = 48) -> list[int]:
    ids = tok.encode(" ".join([TEXT] * 6))[:n]
    assert len(ids) == n
    return ids


def compare(hf, model, idx, mask=None) -> None:
    """gptviz against transformers on ``idx``: the logits (within 1e-4) and every layer's attention pattern (within
    1e-5) of each real query (a padded query's row is transformers' own business)."""
    with torch.no_grad():
        out = hf(idx, attention_mask=mask, output_attentions=True)
    from gptviz import trace
    from gptviz.model.hook_names import act_name

    tr = trace(model, idx, attention_mask=mask)
    real = torch.ones_like(idx, dtype=torch.bool) if mask is None else mask.bool()
    assert (tr["hook_logits"] - out.logits)[real].abs().max().item() < 1e-4
    assert len(out.attentions) == model.config.n_layer
    for layer, pattern in enumerate(out.attentions):  # (B, n_head, T, T)
        ours = tr[act_name("pattern", layer)]
        for b in range(idx.shape[0]):
            assert (ours[b][:, real[b]] - pattern[b][:, real[b]]).abs().max().item() < 1e-5, (layer, b)


def two_rows(tok):
    """Two rows of 40 tokens (five sliding windows of 8), the second the first reversed and left-padded by 5."""
    ids = long_ids(tok, 40)
    two = torch.tensor([ids, ids[::-1]])
    mask = torch.ones_like(two)
    mask[1, :5] = 0
    return two, mask
