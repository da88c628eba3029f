"""A page's link to another page (``nav.link``) hands Streamlit the session's own page object, found by its
address: Streamlit then neither resolves the file's path on disk nor searches the pages for it (issue 37: 0.3 ms of
every run of Attention). The link is the same: the registered page's address and hash."""
import os
import sys

from apphelp import ROOT
from streamlit.testing.v1 import AppTest

from gptviz.ui import nav


def test_a_link_names_the_sessions_own_page_without_resolving_a_path(monkeypatch):
    import streamlit.elements.widgets.button as button

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    resolved = []
    real = os.path.realpath

    def realpath(p, *a, **kw):  # os.path is every module's: count the calls st.page_link makes
        if sys._getframe(1).f_code.co_filename == button.__file__:
            resolved.append(p)
        return real(p, *a, **kw)

    monkeypatch.setattr(os.path, "realpath", realpath)
    at.switch_page("app_pages/attention.py").run()
    assert not at.exception
    who = [lk for lk in at.get("page_link") if lk.proto.label.startswith("Which heads made the prediction")]
    assert len(who) == 1
    pages = {p.url_path: p for ps in at.session_state[nav.NAV_PAGES].values() for p in ps}
    assert who[0].proto.page == "Who_did_it" and who[0].proto.page_script_hash == pages["Who_did_it"]._script_hash
    assert resolved == []  # no path was resolved to find it
    at.switch_page("app_pages/who_did_it.py").run()  # and the page it names opens
    assert not at.exception and at.title[0].value.startswith("Who did it")
