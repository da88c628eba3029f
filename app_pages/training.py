"""Train the model live and watch its loss fall and its attention patterns form."""
import streamlit as st

from gptviz.ui import page_setup, state
from gptviz.ui.sections import training as sec
from gptviz.ui.sections import training_material, training_replay, training_reverse

ctx = page_setup("Training", ":material/fitness_center:")
state.use_source(ctx)  # a model with an encoder reads the session's source
st.title("Training")
if sec.mode(ctx, key="train") == sec.REPLAY:
    st.markdown("The shipped **Induction heads** model (two attention-only layers, trained on Shakespeare with "
                "repeated random runs mixed in) was saved at many steps. Move the slider across the jump: the loss "
                "on the repeated copy collapses as a layer-1 head learns to look at the token after the previous "
                "occurrence of the current one.")
    training_replay.induction_replay(ctx, key="replay")
    st.stop()

sec.notices(ctx, key="train")
training_replay.last_run(ctx, key="train")
task_name = sec.choose_task(ctx, key="train")
if task_name == "reverse":
    training_reverse.reverse(ctx, key="train")
elif task_name == "material":
    training_material.material_loop(ctx, key="train")
else:
    sec.train_task(ctx, key="train", task_name=task_name)
