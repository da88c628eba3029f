"""Running gptviz on more than one process: HAProxy with sticky sessions in front of N replicas sharing one Redis
(``cluster`` starts them on loopback, ``run_local`` is the one command), and the same on paper for a container
platform (``Dockerfile``, ``k8s.yaml``). See deploy/haproxy.cfg's header for why the sessions are sticky."""
