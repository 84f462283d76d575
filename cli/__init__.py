"""The `flotilla` command: one module per command group, assembled by `cli/main.py`, plus the local-cluster
launcher (`cli/local_cluster.py`) used by `flotilla up`, tests and benchmarks.

Sits on top: it may import every package below it (net/ for the client and the node runtime, broker/ for the
config, simulations/ for `flotilla simulate`); nothing but tests and benchmarks imports it.
"""
