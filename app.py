"""gptviz: `streamlit run app.py`. The pages live in pages/; this names and groups them."""
from gptviz.ui import navigation  # the package first: sessions starting at once import it in one order

navigation().run()
