"""Every recorded step, one at a time, in the order the model computes them."""
from gptviz.ui import page_setup
from gptviz.ui.sections import steps as sec

ctx = page_setup("Step-through", ":material/skip_next:")
sec.walk(ctx, key="step")
