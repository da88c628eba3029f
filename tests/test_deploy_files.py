"""The deployment files (deploy/): HAProxy's config passes `haproxy -c` (as shipped and as run_local renders it
for 3 replicas) and keeps the sticky cookie and the health check; the Kubernetes YAML parses and has what a class
needs (replicas, session affinity, Redis, GPTVIZ_REDIS_URL); the Dockerfile's COPY sources exist and its torch is
the one requirements.txt pins. No container engine runs here, so the image itself is not built."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy.cluster import Ports, haproxy_binary, haproxy_env, render_haproxy_config

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
needs_haproxy = pytest.mark.skipif(not Path(haproxy_binary()).exists() and not shutil.which("haproxy"),
                                   reason="haproxy is not installed (apt-get install -y haproxy)")


def haproxy_check(cfg: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([haproxy_binary(), "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30,
                          env=env)


@needs_haproxy
def test_haproxy_config_as_shipped_is_valid():
    r = haproxy_check(DEPLOY / "haproxy.cfg")
    assert r.returncode == 0, r.stdout + r.stderr


@needs_haproxy
def test_haproxy_config_rendered_for_three_replicas_is_valid(tmp_path):
    text = render_haproxy_config(3)
    servers = re.findall(r"^\s*server (app\d) \"\$\{GPTVIZ_APP\d\}\" cookie (app\d)$", text, re.M)
    assert servers == [("app1", "app1"), ("app2", "app2"), ("app3", "app3")]
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(text)
    r = haproxy_check(cfg, env=haproxy_env(Ports(replicas=3, first_app=9100)))
    assert r.returncode == 0, r.stdout + r.stderr


def test_haproxy_config_is_sticky_checks_health_and_keeps_websockets_open():
    text = (DEPLOY / "haproxy.cfg").read_text()
    lines = {line.strip() for line in text.splitlines() if not line.strip().startswith("#")}
    assert "cookie GPTVIZ_SRV insert indirect nocache httponly" in lines
    assert "option httpchk GET /_stcore/health" in lines
    assert "option redispatch 1" in lines
    assert any(line.startswith("timeout tunnel ") for line in lines)
    assert any(line.startswith("default-server check inter 1s fall 3") for line in lines)
    assert "timeout check 5s" in lines  # a busy replica answers its health check late, not never


def test_k8s_yaml_parses_and_has_replicas_affinity_and_redis():
    docs = list(yaml.safe_load_all((DEPLOY / "k8s.yaml").read_text()))
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    app = by[("Deployment", "gptviz")]
    assert app["spec"]["replicas"] >= 2
    env = {e["name"]: e["value"] for e in app["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPTVIZ_REDIS_URL"] == "redis://gptviz-redis:6379/0"
    assert by[("Service", "gptviz")]["spec"]["sessionAffinity"] == "ClientIP"
    assert by[("Ingress", "gptviz")]["metadata"]["annotations"]["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert ("Deployment", "gptviz-redis") in by
    assert by[("Service", "gptviz-redis")]["spec"]["ports"][0]["port"] == 6379


def measured_slowest_health_ms() -> int:
    """The slowest health answer haproxy.cfg's comment cites (its table of `python -m tools.load.health` figures)."""
    maxima = [int(m) for m in re.findall(r"max +(\d+) ms", (DEPLOY / "haproxy.cfg").read_text())]
    assert len(maxima) >= 5, "haproxy.cfg no longer cites the measured health-check figures"
    return max(maxima)


def test_every_health_check_waits_well_past_the_slowest_answer_measured():
    """A check's timeout is at least 4x the slowest answer the measured figures show (HAProxy's, and both of the
    Kubernetes probes'), and a replica is out only after 3 failures in a row."""
    slowest = measured_slowest_health_ms()
    text = (DEPLOY / "haproxy.cfg").read_text()
    assert int(re.search(r"^\s*timeout check (\d+)s$", text, re.M).group(1)) * 1000 >= 4 * slowest
    assert int(re.search(r"^\s*default-server check inter \S+ fall (\d+)", text, re.M).group(1)) >= 3
    app = next(d for d in yaml.safe_load_all((DEPLOY / "k8s.yaml").read_text())
               if d["kind"] == "Deployment" and d["metadata"]["name"] == "gptviz")
    container = app["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        spec = container[probe]
        assert spec.get("timeoutSeconds", 1) * 1000 >= 4 * slowest, probe  # Kubernetes' default is 1 s
        assert spec.get("failureThreshold", 3) >= 3, probe


def test_dockerfile_copies_files_that_exist_and_pins_requirements_torch():
    text = (DEPLOY / "Dockerfile").read_text()
    sources = [s for line in re.findall(r"^COPY (.+)$", text, re.M) for s in line.split()[:-1]]
    assert sources, "no COPY lines"
    assert not [s for s in sources if not (ROOT / s).exists()]
    torch_pin = re.search(r"^torch==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert f"torch=={torch_pin}" in text
    assert "streamlit\", \"run\", \"app.py" in text
