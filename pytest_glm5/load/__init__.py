"""The load wing: the workload and result types (types.py, no HTTP import), the streaming client (client.py) and
its transport, the client's measurement of itself (clientload.py), the server's /metrics view (servermetrics.py),
and SGLang's own bench_serving run on the same requests (benchserving.py)."""
