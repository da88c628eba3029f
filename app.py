"""gptviz: `streamlit run app.py`. The pages live in app_pages/; gptviz.ui.nav names and groups them.

This file has two parts. Streamlit runs it as each page view's script (``__name__ == "__main__"``): the navigation.
`streamlit run app.py` first imports it to serve it, finds the ``st.App`` below, and starts the server with that
App's lifespan, which warms the process up (``gptviz.ui.warm_up``) while the server already answers: a class that
joins a server started as it sits down no longer waits for the imports.
"""
import streamlit as st

if __name__ == "__main__":
    from gptviz.ui import navigation  # the package first: sessions starting at once import it in one order

    navigation().run()
else:
    import contextlib
    import threading

    def _warm_up() -> None:
        from gptviz.ui import warm_up  # here, in its own thread: importing gptviz.ui is most of the work

        warm_up.warm_logged()

    @contextlib.asynccontextmanager
    async def _warm_up_as_the_server_starts(_app):
        threading.Thread(target=_warm_up, name="gptviz-warm-up", daemon=True).start()  # daemon: never keeps a stop
        yield

    app = st.App(__file__, lifespan=_warm_up_as_the_server_starts)
