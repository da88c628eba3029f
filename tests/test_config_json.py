"""The config's JSON, the key of every cache that depends on a config: kept per config, and always that config's."""
import json

from gptviz import preset
from gptviz.present.settings import config_json


def test_each_config_gets_its_own_sorted_json_on_every_call():
    a = preset("default")
    b = a.replace(n_layer=a.n_layer + 1)
    c = preset("llama-like")
    for _ in range(2):  # a first call and a kept one
        for cfg in (a, b, c):
            assert json.loads(config_json(cfg)) == cfg.to_dict()
            assert config_json(cfg) == json.dumps(cfg.to_dict(), sort_keys=True)
    assert config_json(a) != config_json(b) and json.loads(config_json(b))["n_layer"] == a.n_layer + 1
    assert config_json(a.replace()) == config_json(a)  # an equal config, another object: the same key
