"""The broker, sans-IO: Kafka API handlers, hosted partitions and replication state, the node composition.

Owns: `KafkaApis` (a registry of API handlers, `broker/apis.py`, with the handlers grouped by area in
`broker/handlers_*.py`), `BrokerCore` (hosted partitions, purgatories, replica fetchers' state,
`broker/core.py`), the private admin API, the controller pipeline over the Raft
log (`broker/controller_core.py`), the validated cluster config (`broker/config.py`) and `NodeState`
(`broker/node_state.py`), the one object that composes a node's cores and that both runtimes drive, and the
node's calls to the active controller (`broker/controller_calls.py`), which both runtimes carry.

Never imports: trio, sockets, clocks, threads or randomness (the runtimes in net/ and simulations/ bring
those), nor net/ (but its sans-IO Kafka codec, net.protocol), cli/, simulations/ or spark/.
"""
