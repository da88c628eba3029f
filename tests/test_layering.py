"""The engine imports without Streamlit; only gptviz/ui imports it; pages hold no model math."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_engine_imports_without_streamlit():
    code = ("import sys; import gptviz, gptviz.present.figures, gptviz.present.matrices, gptviz.training.loop, gptviz.run.generation, "
            "gptviz.model.checkpoint, tools.bench; assert 'streamlit' not in sys.modules, 'streamlit was imported'")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_only_the_ui_layer_and_pages_import_streamlit():
    for path in (ROOT / "gptviz").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text()
        imports = re.search(r"^\s*(import streamlit|from streamlit)", text, re.M)
        if rel.startswith("gptviz/ui/") or rel == "gptviz/bench.py":
            continue
        assert not imports, f"{rel} imports streamlit"


def test_pages_do_no_model_math():
    banned = re.compile(r"\bF\.\w+\(|torch\.(softmax|matmul|exp|log)|np\.(log|exp)\(|\bmodel\.run\(|\.backward\(|"
                        r"log_softmax|@ ")
    for path in [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]:
        code = "\n".join(line for line in path.read_text().splitlines() if "st.code(" not in line)
        assert not banned.search(code), (path.name, banned.search(code).group(0))
