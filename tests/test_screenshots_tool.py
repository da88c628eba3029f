"""The documentation's pictures come from ``python -m tools.screenshots`` (no browser here: only its list and its
output). Every page of the app has a shot, and every shot's picture is in docs/screenshots at 1280×720."""
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHOTS_DIR = ROOT / "docs" / "screenshots"
VIEWPORT = (1280, 720)


@pytest.fixture(scope="module")
def listed() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "tools.screenshots", "--list"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    names = out.stdout.split()
    assert names, "--list printed no shot"
    return names


def _slug(title: str) -> str:
    """The picture's name for a page title, as the documentation spells it: "Logits & loss" -> logits_and_loss."""
    return re.sub(r"[^a-z0-9]+", "_", title.lower().replace("&", " and ")).strip("_")


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's header: the signature, then the IHDR chunk's first two fields."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    _, kind, width, height = struct.unpack(">I4sII", head[8:24])
    assert kind == b"IHDR", f"{path.name}: no IHDR chunk first"
    return width, height


def test_every_page_file_has_a_shot_in_navigation_order(listed):
    from gptviz.ui.nav import PAGES  # (file, title, icon, url_path, section)

    titles = {Path(p[0]).name: p[1] for p in PAGES}
    files = sorted(p.name for p in (ROOT / "app_pages").glob("*.py") if p.name != "__init__.py")
    assert files, "no page file in app_pages/"
    for name in files:
        assert name in titles, f"app_pages/{name} is not in gptviz.ui.nav.PAGES, so it has no screenshot"
        assert _slug(titles[name]) in listed, f"no screenshot of app_pages/{name} ({titles[name]!r}) in --list"
    page_shots = [_slug(p[1]) for p in PAGES]
    assert listed[:len(page_shots)] == page_shots, "the page shots come first, in the app's navigation order"
    assert "hero" in listed


def test_every_listed_shot_is_in_docs_at_1280x720(listed):
    for name in listed:
        path = SHOTS_DIR / f"{name}.png"
        assert path.is_file(), f"{path.relative_to(ROOT)} is missing: python -m tools.screenshots --only {name}"
        assert _png_size(path) == VIEWPORT, f"{path.name} is {_png_size(path)}, not {VIEWPORT}"


def test_no_picture_in_docs_is_one_the_tool_does_not_make(listed):
    made_by_hand = sorted(p.name for p in SHOTS_DIR.glob("*.png") if p.stem not in listed)
    assert not made_by_hand, f"pictures python -m tools.screenshots does not make: {made_by_hand}"
