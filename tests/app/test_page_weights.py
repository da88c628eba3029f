import os

import torch
from apphelp import messages, ok, page

from gptviz import GPT, ModelConfig
from gptviz.model.checkpoint import checkpoint_bytes


def weights_file(at):
    """The "Weights file" uploader (the model-folder uploader comes first on the page)."""
    return next(u for u in at.get("file_uploader") if u.key == "wt.upload")


def status(at) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("The pages now show"))


def test_shipped_checkpoints_are_offered_and_load():
    at = ok(page("weights"))
    names = [b.label for b in at.button if b.label.startswith("Use ")]
    assert {"Use sort", "Use induction", "Use text"} <= set(names)
    at = [b for b in at.button if b.label == "Use sort"][0].click().run()
    ok(at)
    assert "shipped checkpoint: sort" in status(at)
    s = at.session_state["gptviz.settings"]
    assert "|" in s["text"]


def test_checkpoint_preset_from_a_link():
    at = ok(page("attention", preset="checkpoint: induction"))
    assert at.session_state["gptviz.settings"]["model_key"] == "ckpt-induction"
    assert at.text_area(key="w.text").value == "kbhdcafkbhdcaf"  # the sidebar shows the model's example
    assert at.title[0].value.startswith("Attention · layer 0")


def test_upload_a_gptviz_checkpoint():
    cfg = ModelConfig(vocab_size=70, n_layer=1, n_head=2, n_embd=8, block_size=16, seed=3)
    data = checkpoint_bytes(GPT(cfg), None, note="test")
    at = page("weights")
    weights_file(at).upload("mine.safetensors", data)
    at.run()
    at = [b for b in at.button if b.label == "Load this file"][0].click().run()
    ok(at)
    assert "uploaded mine.safetensors" in status(at)
    assert "1 layer(s) × 2 head(s), n_embd=8" in status(at)


def test_bad_uploads_are_messages_with_no_side_effect(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    import io

    buf = io.BytesIO()
    torch.save({"model": Evil(), "model_args": {}}, buf)
    for name, data, expect in [("evil.pt", buf.getvalue(), "refused unread"),
                               ("half.safetensors", checkpoint_bytes(GPT(ModelConfig()))[:500], "truncated"),
                               ("notes.safetensors", b"just some text", "not a readable")]:
        at = page("weights")
        before = status(at)
        weights_file(at).upload(name, data)
        at.run()
        at = [b for b in at.button if b.label == "Load this file"][0].click().run()
        ok(at)
        assert expect in messages(at) and f"{name} was not loaded" in messages(at)
        assert status(at) == before  # still the same model
    assert not marker.exists()


OFFLINE_MSG = ("GPT-2 could not be downloaded: the Hugging Face hub is not reachable from this machine (offline?) "
               "and it is not in the local cache. (OSError)")


def test_hub_download_offline_says_why(monkeypatch, tmp_path):
    """Offline made explicit, so the test is the same on a machine with network or without, and never starts a
    548 MB download: the hub is offline (HF_HUB_OFFLINE), its cache is an empty folder, and any download the
    hub still tried would fail the test."""
    import huggingface_hub
    import huggingface_hub.constants
    import huggingface_hub.file_download
    import transformers  # a dev requirement: the page's "needs transformers" branch is not what this tests

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    tried = []

    def no_download(*a, **k):
        tried.append(a)
        raise AssertionError("a hub download was started")

    monkeypatch.setattr(huggingface_hub.file_download, "http_get", no_download)
    real = transformers.GPT2LMHeadModel.from_pretrained.__func__
    calls = []

    def offline_from_pretrained(cls, name, *a, **k):  # the real loader, with an empty cache, offline
        calls.append(name)
        return real(cls, name, *a, **{**k, "cache_dir": str(tmp_path), "local_files_only": True})

    monkeypatch.setattr(transformers.GPT2LMHeadModel, "from_pretrained", classmethod(offline_from_pretrained))

    at = page("weights")
    before = status(at)
    at = [b for b in at.button if b.label == "Load GPT-2 small"][0].click().run()
    ok(at)
    assert calls == ["gpt2"] and not tried
    assert [e.value for e in at.error] == [OFFLINE_MSG]
    assert status(at) == before  # still the same model


def test_a_huge_upload_is_refused_before_it_is_read(monkeypatch):
    import gptviz.model.checkpoint

    at = page("weights")
    before = status(at)
    monkeypatch.setattr(gptviz.model.checkpoint, "MAX_BYTES", 1000)  # stands in for a multi-GB file
    data = checkpoint_bytes(GPT(ModelConfig()))
    weights_file(at).upload("huge.safetensors", data)
    at.run()
    at = [b for b in at.button if b.label == "Load this file"][0].click().run()
    ok(at)
    assert "over the" in messages(at) and "limit" in messages(at)
    assert status(at) == before


def test_the_page_says_which_families_open_and_what_each_adds():
    """One row per family gptviz opens (the loader's registry, FAMILIES), with its model_type and what it adds."""
    from gptviz.model.hf_registry import FAMILIES, FAMILY_TABLE

    at = ok(page("weights"))
    tables = [t.value for t in at.table]
    df = next(t for t in tables if "config.json's model_type" in t.columns)
    assert list(df["config.json's model_type"]) == list(FAMILY_TABLE) and set(FAMILY_TABLE) == set(FAMILIES)
    assert list(df["family"]) == [r.name for r in FAMILY_TABLE.values()]
    assert "learned attention sinks" in df.set_index("config.json's model_type").loc["gpt_oss", "what it adds"]
