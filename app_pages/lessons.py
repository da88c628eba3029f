"""Lessons: a guided path through the app, one step per screen, drawn from the live model; presenter mode
(``?present=1``) for a projector, the arrow keys move between steps (see gptviz/ui/sections/lessons.py); a live
class (``?class=CODE``): students follow the teacher and answer on their own screens (sections/live_class.py)."""
from gptviz.ui import page_setup
from gptviz.ui.sections import lessons as sec
from gptviz.ui.sections import live_class as live

present = sec.presenter_mode(key="lessons")  # read before page_setup, which rewrites the address bar
live.read_address(key="lessons")
ctx = page_setup("Lessons", ":material/school:")
sec.use_stylesheet(present)

live.follow(key="lessons")  # a following student (or the teacher's fresh session) goes where the class is
place = sec.picker(ctx, key="lessons")  # the lesson and step shown (the page stops here if there is no lesson)
live.panel(ctx, key="lessons", place=place)  # the class bar; the class's question goes to the step
sec.heading(ctx, key="lessons", place=place)
sec.step(ctx, key="lessons", place=place)
sec.footer(ctx, key="lessons", place=place)
sec.keep_address_bar(place, key="lessons")
live.keep_address_bar(key="lessons")
