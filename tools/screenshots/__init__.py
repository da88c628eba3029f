"""``python -m tools.screenshots``: every picture the documentation uses, taken from the real app.

It starts ``streamlit run app.py`` on a free local port, opens each shot's address in Debian's Chromium at
1280×720 (what a user sees above the fold, not the whole page), waits until the page is fully drawn, performs the
shot's few actions if it has any, and saves ``docs/screenshots/<name>.png``; then it stops the server it started.

- ``shots.py``: the declared list (one shot per page of the app, in its navigation order, plus the special views);
- ``drawn.py``: when a page counts as fully drawn;
- ``live_class.py``: the one view that takes more than an address (a class with three students);
- ``run.py``: the server, the browser and the loop; ``__main__.py``: the command line.
"""
