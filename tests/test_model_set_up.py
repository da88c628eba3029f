"""What ``TransformerBase.set_up`` promises about a freshly built model, checked on the model itself: inside
``shapes_only()`` nothing is allocated; otherwise every weight lands on the CPU in the dtype it was built with; the
position tables are buffers the forward pass reads but a saved checkpoint never holds."""
import torch

from gptviz import ModelConfig, preset
from gptviz.model.base import shapes_only
from gptviz.model.build import build_model

TABLES = ("pos_table", "rope_cos", "rope_sin", "rope_cos_local", "rope_sin_local")


def test_inside_shapes_only_nothing_is_allocated_and_after_it_everything_is():
    cfg = preset("default", vocab_size=30)
    with shapes_only():
        meta = build_model(cfg)
    assert all(p.is_meta for p in meta.parameters())
    built = build_model(cfg)  # the block is over: a real model again
    assert not any(p.is_meta for p in built.parameters())
    assert all(p.device.type == "cpu" for p in built.parameters())


def test_the_weights_keep_the_dtype_they_were_built_in():
    """A model built while torch's default is float64 is float64 throughout (the allocation copies each meta
    tensor's dtype, as nn.Module.to_empty did)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = build_model(preset("default", vocab_size=30))
    finally:
        torch.set_default_dtype(before)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert all(torch.isfinite(p).all() for p in model.parameters())  # drawn from the seed, not left uninitialised


def test_the_position_tables_are_buffers_no_checkpoint_holds():
    configs = {
        "sinusoidal": preset("original-transformer", vocab_size=30),
        "rope": preset("llama-like", vocab_size=30),
        "rope with a local base": ModelConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, n_embd=8,
                                              pos_encoding="rope", sliding_window=3, sliding_layers=(0,),
                                              rope_local_base=50),
    }
    expected = {"sinusoidal": {"pos_table"}, "rope": {"rope_cos", "rope_sin"},
                "rope with a local base": {"rope_cos", "rope_sin", "rope_cos_local", "rope_sin_local"}}
    for name, cfg in configs.items():
        model = build_model(cfg)
        buffers = {b for b, _ in model.named_buffers() if b in TABLES}
        assert buffers == expected[name], name
        assert not set(model.state_dict()) & set(TABLES), name
