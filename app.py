"""gptviz: `streamlit run app.py`. The pages live in app_pages/; gptviz.ui.nav names and groups them."""
from gptviz.ui import navigation  # the package first: sessions starting at once import it in one order

navigation().run()
