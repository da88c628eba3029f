from apphelp import charts, messages, ok, page, titles


def train(at, task, steps):
    at.selectbox(key="train.task").set_value(task).run()
    at.number_input(key=f"train.steps.{task}").set_value(steps)
    return [b for b in at.button if "Start training" in b.label][0].click().run()


def test_before_training_shows_the_current_pattern():
    at = ok(page("training"))
    assert titles(at)[0].startswith("Now: layer 0 head 0 attention")


def test_training_sort_then_replay_and_every_page_uses_it():
    at = train(page("training"), "sort", 60)
    ok(at)
    assert any("Trained for 60 steps" in m.value for m in at.success)
    t = titles(at)
    assert any("step 60 on" in x for x in t) and any("Loss during training" in x for x in t)
    loss = [c for c in charts(at) if c["layout"]["title"]["text"] == "Loss during training"][0]["data"][0]["y"]
    assert loss[-1] < loss[0]
    # replay an early snapshot
    sl = at.select_slider(key="train.snap")
    at = sl.set_value(0).run()
    assert any("step 0 on" in x for x in titles(at))
    at = at.selectbox(key="train.replay.step").set_value("hook_embed").run()
    assert any(x.startswith("Token embedding · step 0 on") for x in titles(at))
    s = at.session_state["gptviz.settings"]
    assert s["model_key"] and "|" in s["text"]  # the sort model and an example in its format


def test_text_on_a_short_user_text_is_a_message():
    at = train(page("training"), "mytext", 5)
    ok(at)
    assert "too short to train on" in messages(at)


def test_bad_learning_rate_is_refused_with_a_message():
    at = page("training")
    at.selectbox(key="train.task").set_value("induction").run()
    assert at.number_input(key="train.lr.induction").value == 0.01  # the task's default
    for lr in (0.0, -0.01, 5.0, 100.0):
        at = page("training")
        at.number_input(key="train.steps.sort").set_value(2)
        at.number_input(key="train.lr.sort").set_value(lr)
        at = [b for b in at.button if "Start training" in b.label][0].click().run()
        assert not at.exception, [e.message for e in at.exception]
        assert [e.value for e in at.error] == [
            f"Can't train with these settings: the learning rate {lr:g} is out of range: choose one above 0 and at "
            "most 1 (this task's default is 0.003)"], lr
        assert not at.success and not at.session_state["gptviz.settings"].get("model_key"), lr  # nothing trained
    # the largest rate allowed trains
    at = page("training")
    at.number_input(key="train.steps.sort").set_value(2)
    at.number_input(key="train.lr.sort").set_value(1.0)
    at = [b for b in at.button if "Start training" in b.label][0].click().run()
    assert not at.error and any("Trained for 2 steps" in m.value for m in at.success)
