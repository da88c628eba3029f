"""The shipped checkpoints' names: listed again when checkpoints/ changes, and only then (one stat a run)."""
import os

from gptviz.ui import resources


def test_the_names_follow_the_folder_and_an_unchanged_folder_is_not_listed_again(tmp_path, monkeypatch):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for name in ("b_model", "a_model", "a_model.snapshots"):
        (folder / f"{name}.safetensors").write_bytes(b"")
    (folder / "notes.txt").write_text("not a checkpoint")
    monkeypatch.setattr(resources, "CHECKPOINTS", folder)
    resources._shipped_listing.cache_clear()
    listed = []
    real_glob = type(folder).glob

    def glob(self, pattern):
        listed.append(pattern)
        return real_glob(self, pattern)

    monkeypatch.setattr(type(folder), "glob", glob)
    assert resources.shipped_names() == ["a_model", "b_model"]
    assert resources.shipped_names() == ["a_model", "b_model"] and len(listed) == 1
    (folder / "c_model.safetensors").write_bytes(b"")
    os.utime(folder, ns=(0, os.stat(folder).st_mtime_ns + 1_000_000_000))  # a coarse clock still sees the change
    assert resources.shipped_names() == ["a_model", "b_model", "c_model"] and len(listed) == 2
    (folder / "a_model.safetensors").unlink()
    os.utime(folder, ns=(0, os.stat(folder).st_mtime_ns + 1_000_000_000))
    assert resources.shipped_names() == ["b_model", "c_model"]
    assert resources.shipped_names() is not resources.shipped_names()  # a caller's list is its own to change
    resources._shipped_listing.cache_clear()


def test_the_real_folder_lists_the_shakespeare_gpt():
    assert "shakespeare" in resources.shipped_names()
