"""Lessons: a guided path through the app, one step per screen, drawn from the live model; presenter mode
(``?present=1``) for a projector, the arrow keys move between steps (see gptviz/ui/sections/lessons.py)."""
from gptviz.ui import page_setup
from gptviz.ui.sections import lessons as sec

present = sec.presenter_mode(key="lessons")  # read before page_setup, which rewrites the address bar
ctx = page_setup("Lessons", ":material/school:")
sec.use_stylesheet(present)

place = sec.picker(ctx, key="lessons")  # the lesson and step shown (the page stops here if there is no lesson)
sec.heading(ctx, key="lessons", place=place)
sec.step(ctx, key="lessons", place=place)
sec.footer(ctx, key="lessons", place=place)
sec.keep_address_bar(place, key="lessons")
