"""The suite's file order (tests/conftest.py): every file named as slow exists, so a renamed file is not silently
left to run last."""
from conftest import ROOT, SLOW_FILES_FIRST


def test_every_file_named_slow_exists_once():
    assert len(set(SLOW_FILES_FIRST)) == len(SLOW_FILES_FIRST)
    missing = [f for f in SLOW_FILES_FIRST if not (ROOT / "tests" / f).is_file()]
    assert not missing, f"tests/conftest.py's SLOW_FILES_FIRST names files that are gone: {missing}"
