"""Model folders as users have them: every family gptviz opens, its config.json as transformers 5 saves it (rotary
settings in one ``rope_parameters`` object) and the same config rewritten by hand as older versions saved it
(``rope_theta`` at the top, a scaling as ``rope_scaling``, GPT-NeoX's ``rotary_pct`` and ``rotary_emb_base``,
Phi-3's ``partial_rotary_factor`` at the top). Both must give the same ModelConfig and the same logits as
transformers, which reads each folder itself (the oracle that the rewrite is faithful: ``from_pretrained`` on the
older folder, eager attention, compared with gptviz on that folder). One scaled case a form: llama3 on a Llama,
longrope (with partial rotary) on a Phi-3; and each fraction turned is not the family's default, so a form whose
key is not read shows."""
import json
import shutil

import pytest
import torch
from hf_models import build, compare, long_ids
from lazy_import import lazy

import gptviz
from gptviz.model.pretrained import model_config

transformers = lazy("transformers", skip=True)
tokenizers = pytest.importorskip("tokenizers")

CASES = {  # name: (family, what build() is given)
    "gpt2": ("gpt2", {}),
    "llama": ("llama", {}),
    "llama, llama3 scaling": ("llama", {"rope_parameters": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32, "rope_theta": 500.0}}),
    "mistral": ("mistral", {}),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
    "gpt_neox, rotary_pct 0.5": ("gpt_neox", {"rope_parameters": {  # not the 0.25 a config without one gets
        "rope_type": "default", "rope_theta": 2000.0, "partial_rotary_factor": 0.5}}),
    "gemma": ("gemma", {}),
    "gemma2": ("gemma2", {}),
    "gemma3_text, local and global bases, linear scaling": ("gemma3_text", {}),
    "olmo2": ("olmo2", {}),
    "mixtral": ("mixtral", {}),
    "qwen2_moe": ("qwen2_moe", {}),
    "olmoe": ("olmoe", {}),
    "gpt_oss, yarn": ("gpt_oss", {}),
    "phi3, longrope, partial rotary": ("phi3", {"original_max_position_embeddings": 16, "rope_parameters": {
        "rope_type": "longrope", "rope_theta": 500.0, "partial_rotary_factor": 0.5,
        "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [2.0, 4.0, 8.0, 16.0]}}),
}
CLASSES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
           "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "gpt_neox": "GPTNeoXForCausalLM",
           "gemma": "GemmaForCausalLM", "phi3": "Phi3ForCausalLM", "gemma2": "Gemma2ForCausalLM",
           "gemma3_text": "Gemma3ForCausalLM", "olmo2": "Olmo2ForCausalLM", "mixtral": "MixtralForCausalLM",
           "qwen2_moe": "Qwen2MoeForCausalLM", "olmoe": "OlmoeForCausalLM", "gpt_oss": "GptOssForCausalLM"}


def older_form(d: dict) -> dict:
    """config.json ``d`` as transformers 4 saved it: no ``rope_parameters``; ``rope_theta`` (GPT-NeoX:
    ``rotary_emb_base``) and ``partial_rotary_factor`` (GPT-NeoX: ``rotary_pct``) at the top; a scaling as
    ``rope_scaling``, its type under ``type`` (the oldest key), without the ``original_max_position_embeddings``
    transformers 5 copies in from the top (Phi-3 keeps it at the top, as its configs always had it)."""
    old = {k: v for k, v in d.items() if k not in ("rope_parameters", "transformers_version")}
    p = dict(d.get("rope_parameters") or {})
    if "full_attention" in p:  # Gemma 3: one set a layer type; before, rope_theta (+ rope_scaling) for the global
        local, p = p["sliding_attention"], dict(p["full_attention"])  # layers, rope_local_base_freq for the others
        old["rope_local_base_freq"] = local["rope_theta"]
    if not p:
        return old
    neox = d["model_type"] == "gpt_neox"
    old["rotary_emb_base" if neox else "rope_theta"] = p.pop("rope_theta")
    if "partial_rotary_factor" in p:
        pct = p.pop("partial_rotary_factor")
        if neox or pct != 1.0:
            old["rotary_pct" if neox else "partial_rotary_factor"] = pct
    kind = p.pop("rope_type")
    if kind != "default":
        if "original_max_position_embeddings" in d:
            p.pop("original_max_position_embeddings", None)
        # Gemma 3 was released after "rope_type" replaced "type", and its config.json files say "rope_type"
        old["rope_scaling"] = {"rope_type" if "rope_local_base_freq" in old else "type": kind, **p}
    return old


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Each case built once: (transformers' model, the folder as saved, the folder in the older form)."""
    out = {}
    for name, (family, extra) in CASES.items():
        new = tmp_path_factory.mktemp("new")
        hf = build(family, new, **json.loads(json.dumps(extra)))
        old = tmp_path_factory.mktemp("old")
        shutil.copytree(new, old, dirs_exist_ok=True)
        (old / "config.json").write_text(json.dumps(older_form(json.loads((new / "config.json").read_text()))))
        out[name] = (hf, new, old)
    return out


def test_every_family_gptviz_opens_is_here():
    from gptviz.model.hf_registry import FAMILIES

    assert {family for family, _ in CASES.values()} == set(FAMILIES)


@pytest.mark.parametrize("name", list(CASES))
def test_both_forms_of_config_json_open_as_the_same_model_as_transformers(folders, name):
    hf, new, old = folders[name]
    d_new, d_old = (json.loads((f / "config.json").read_text()) for f in (new, old))
    if name != "gpt2":  # GPT-2 has no rotary positions: its two forms are one
        assert "rope_parameters" in d_new and "rope_parameters" not in d_old and "rope_theta" not in d_new
    scaled = CASES[name][1].get("rope_parameters", {}).get("rope_type", "default") != "default" or \
        name.startswith(("gemma3_text", "gpt_oss"))  # hf_models' Gemma 3 and GPT-OSS scale (linear, yarn)
    assert ("rope_scaling" in d_old) == scaled
    cfg_new, cfg_old = model_config(new)[0], model_config(old)[0]
    assert cfg_new == cfg_old
    theirs = transformers.AutoConfig.from_pretrained(str(old)).rope_parameters if name != "gpt2" else None
    if theirs is not None:  # transformers reads the older form as the same rotary settings (and keeps "type" too)
        assert {k: v for k, v in theirs.items() if k != "type"} == hf.config.rope_parameters
    model_new, tok = gptviz.from_pretrained(new)
    model_old, _ = gptviz.from_pretrained(old)
    hf_old = getattr(transformers, CLASSES[CASES[name][0]]).from_pretrained(str(old), attn_implementation="eager")
    idx = torch.tensor([long_ids(tok, 40)])
    compare(hf, model_new, idx)
    compare(hf_old.eval(), model_old, idx)
    with torch.no_grad():
        assert torch.equal(model_new(idx)[0], model_old(idx)[0])
